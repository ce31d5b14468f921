"""What a run writes for TensorBoard: per-step and per-evaluation scalars, console progress
and peak memory (`summaries`), the HParams dashboard (`hparams`), test meshes in the Mesh
dashboard (`mesh_summaries`) and the profile of `profile=true` (`profiling`)."""
