"""The policy: a trained checkpoint read for inference only, evaluated and exported."""
