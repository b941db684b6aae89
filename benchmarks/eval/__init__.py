"""The evaluation harness: the agent on a question set (BIRD, SQaLe, plain), scored by execution."""
