"""Training loops: `custom` (GradientTape step in a tf.function) and `keras` (Model.fit)."""
