"""Training triggers: stop on a bad loss or a non-finite value, say where it was born, keep the step to replay.

``break_if`` checks a loss against thresholds and spikes; ``watch`` keeps a cheap per-step
``sentinel`` on gradients, losses and updates, and when it fires ``localize`` re-runs the step
to find the first module, phase and op; ``incident`` writes a replayable bundle, ``report``
renders what fired, ``stop`` sends it to the debugger the user is in, ``replay`` re-runs a
bundle.
"""
