"""The benchmark, `python -m meshseg.tools.bench` (`command`: its arguments and `main`):
each configuration measured in its own process (`worker`, `python -m
meshseg.tools.bench.worker`), with the GPU's memory (`device_memory`) and the step's work
and roofline bound (`roofline`); its table, CSV, JSON and plot (`report`).

Nothing is imported here, so a worker process loads only what it measures.
"""
