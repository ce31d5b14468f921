"""A run's directory and what it keeps: the claim of a fresh or resumed one and the file
names it holds (`claim`), the lock of the one live process in it (`runlock`), the training
`checkpoints` and their `ownership`, the record of a finished run (`summary`), the jobs of
a sweep as child processes (`sweep`) and the SLURM job step this process is a task of
(`slurm`). Nothing here reads Hydra's config (that is `meshseg.tools.hydra_callbacks`)."""
