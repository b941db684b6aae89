"""The serving layer over the engine: rows of one batch lent to the sequences of many callers, a shared prompt
prefix computed once, and one thread that decodes every waiting row together and lets callers cancel."""
