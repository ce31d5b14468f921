"""Command-line tools around runs and the network, each `python -m meshseg.tools.<name>`:

- `bench` (+ `bench_report`, `bench_worker`): speed and memory of the convolution
  implementations;
- `report`: compare the runs of a directory or sweep (table, Markdown, plots);
- `predict`: per-vertex predictions of a trained run on mesh files;
- `input_bound`: train steps fed by the pipeline against steps fed from memory;
- `throughput`: meshes/s and vertices/s of the input pipeline alone;
- `visualize`: label colours, confusion and mesh figures (the evaluation notebook's).
"""
