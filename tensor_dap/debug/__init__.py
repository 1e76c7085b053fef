"""The terminal debugger: a tensor-aware pdb, its views, crash reports and the hooks that install them.

``tensor_pdb`` is pdb with tensors shown as summaries and training commands; ``session``
opens it (``set_trace``, ``post_mortem``) where a person is watching; ``crash`` turns an
uncaught exception into a report, then the post-mortem; ``install`` routes ``breakpoint()``
and ``sys.excepthook``; ``views`` holds the rich renderables they print; ``frames`` says which
frames are the user's (hidden library frames, the user's line); ``on_demand`` dumps the stacks
when ``tensor-dap stacks`` asks.
"""
