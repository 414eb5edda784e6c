"""The unwinder: the per-frame stepper, rule execution and the fallback strategies."""
