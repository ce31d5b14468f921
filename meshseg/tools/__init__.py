"""Command-line tools around runs and the network, each `python -m meshseg.tools.<name>`:

- `bench` (a package: the command, its `worker` process, `report`, `roofline` and
  `device_memory`): speed and memory of the convolution implementations; `bench_ab`: two
  variants timed in one process;
- `report`: compare the runs of a directory or sweep (table, Markdown, plots);
- `predict`: per-vertex predictions of a trained run on mesh files;
- `input_bound`: train steps fed by the pipeline against steps fed from memory;
- `throughput`: meshes/s and vertices/s of the input pipeline alone;
- `visualize`: label colours, confusion and mesh figures (the evaluation notebook's).

Not a command: `hydra_callbacks`, train.py's Hydra callbacks (run directory, sweep report).
"""
