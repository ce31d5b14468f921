"""Helpers shared by the tests (on the path through `pythonpath = ["tests"]` in
pyproject.toml): `graphs` (random convolution problems and a float64 reference), `runs`
(tiny configs, training runs and what they write) and `docs` (the documentation pages
and their code)."""
