"""Training: the run (`run`) builds everything from the typed config and hands the steps to
a loop. Four subpackages by concern, each importing only those after it in this list (the
import-linter contract in pyproject.toml):

- `loop/`: the two loops (`custom_loop`, `keras_loop`) under one `controller` (restore,
  signals, evaluation and checkpoint schedule), the train `step`, losses and `metrics`,
  `evaluate`, and `impl=auto` (`autotune`, which times the candidates' train steps);
- `device/` and `logs/`, independent of each other: where and how the steps compute
  (`distribute`, `precision=auto`, `gpu_kernels`); what a run writes for TensorBoard
  (`summaries`, `hparams`, `mesh_summaries`, the step profiler `profiling`);
- `rundir/`: a run's directory and what it keeps: the claim (`claim`), its lock
  (`runlock`), `checkpoints` and their `ownership`, the run record (`summary`), a sweep's
  jobs (`sweep`) and the SLURM job step (`slurm`).
"""
