"""Host transfers (spec: infeed, outfeed, send, recv)."""
