"""The engines of the sdpa families."""
