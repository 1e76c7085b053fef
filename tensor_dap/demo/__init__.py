"""``tensor-dap demo``: a tour in which the real tools catch bugs planted on purpose.

``train`` is the bundled training script (synthetic data, CPU, a NaN planted at a known step);
``scenarios`` holds one planted bug each (the NaN, a leaking label, overlapping splits, a
mixed-device model, a slow data loader, a DataParallel checkpoint, a head the optimizer does not hold,
training left in eval mode) and the artifacts a user
opens afterwards (a TensorBoard run, a cProfile ``.prof``, a line_profiler ``.lprof``);
``tour`` runs them, narrates what each tool found and ends with how to open every file.
"""
