"""Training triggers: stop on a bad loss or a non-finite value, say where it was born, keep the step to replay.

``break_if`` checks a loss against thresholds and spikes; ``watch`` keeps a cheap per-step
``sentinel`` on gradients, losses and updates, capturing what a re-run needs (``capture`` for
``w.step``, ``loop`` for an unchanged loop, whose steps ``loop_steps`` counts (``loop_losses``: which loss is a
step's) and whose forwards ``forwards`` keeps and runs again; ``parts`` holds several models one optimizer trains
as one; ``loss_graph`` names the op of a
loss function nobody handed over). When it fires, ``investigate`` re-runs the step and
``localize`` watches it with ``origin``'s tracker to find the op, module and line where the first
NaN/Inf was born (``ops`` names them, ``diagnose`` says the usual fix); ``incident`` writes a
replayable bundle, ``report`` renders what fired (``schema`` reads it back safely), ``stop``
sends it to the debugger the user is in, ``aftermath`` keeps saying so while training goes on
non-finite, ``replay`` re-runs a bundle, ``attach`` puts a watch on a program from outside
(``auto``: what ``tensor-dap run --guard/--loss-above/--replay`` switches on), ``hang`` writes every
rank's stacks when no optimizer step completes for too long; ``active`` knows the open watches;
``eager`` keeps torch.compile from tracing tensor_dap's global hooks.
"""
