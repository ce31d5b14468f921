"""The training loops: `custom_loop` (a GradientTape step) and `keras_loop` (`Model.fit`)
under one `controller` (restore, resume step, signals, evaluation and checkpoint schedule),
the train `step`, the masked losses and `metrics`, `evaluate` on a split, and `impl=auto`
(`autotune`: the candidates' train steps timed on the first batch)."""
