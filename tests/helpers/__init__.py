"""Helpers shared by the tests (on the path through `pythonpath = ["tests"]` in
pyproject.toml): `graphs` (random convolution problems and a float64 reference) and `runs`
(tiny configs, training runs and what they write)."""
