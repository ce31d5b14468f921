"""Training: the run (`run`) builds everything from the typed config and hands the steps to
a loop (`custom_loop`, `keras_loop`) under one `controller` (restore, signals, evaluation
and checkpoint schedule). Around them: the train step (`step`), losses and metrics
(`metrics`), evaluation (`evaluate`), checkpoints, run directories (`rundir`),
distribution (`distribute`), TensorBoard logging (`summaries`, `hparams`), the run summary
record (`summary`) and `impl=auto` (`autotune`).
"""
