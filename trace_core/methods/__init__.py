"""What scores an answer: TRACE, TRACE+'s features, the baselines, spans, and the registry of methods."""
