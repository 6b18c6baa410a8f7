"""``triton-splitk`` and ``triton-decode``: skinny products, K split across programs
(:mod:`.plan` chooses, :mod:`.kernel` computes)."""
