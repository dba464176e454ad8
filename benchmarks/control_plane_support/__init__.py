"""The control-plane benchmark's parts: a resource controller whose backend starts nothing, and a fleet of light clients."""
