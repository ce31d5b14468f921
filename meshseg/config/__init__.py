"""The typed configuration of a run: the schema of `conf/train.yaml` and its groups
(`schema`), every check of the settings (`checks`), and Hydra's composition turned into the
typed `TrainConfig` plus a run's `run_config.yaml` (`compose`). Everything is importable
from `meshseg.config`; nothing here imports TensorFlow.

The schema is registered in Hydra's ConfigStore as `train_schema`, the first entry of the
defaults list, so every key has a type and a default (the default run's) and each
`conf/<group>/<option>.yaml` states only what differs. A wrong type (`steps=abc`), an
unknown key (`data.batch_sise=2`) or an unknown group option fails at composition with
Hydra's one-line message. What the types cannot check is checked before a run writes
anything, by `check`: the range of every number (`INTEGER_RANGES`, `POSITIVE`), choices
(`CHOICES`, and the names of `meshseg.registry`'s networks, implementations and
strategies) and combinations; and by `check_overrides` that a boolean is set only to true
or false (OmegaConf would also read "no", "off", "yes", "on", "0" and "1" as booleans).

The Hydra callback that claims the run directory
(`meshseg.tools.hydra_callbacks.RunDirCheck`) checks the settings before Hydra writes
anything; train.py turns the composed DictConfig into the typed `TrainConfig` once
(`checked_config`), and everything below it, the run included, receives that or plain
values, never a DictConfig.
"""

from meshseg.config.schema import *  # noqa: F401,F403
from meshseg.config.checks import *  # noqa: F401,F403
from meshseg.config.checks import _value  # noqa: F401
from meshseg.config.compose import *  # noqa: F401,F403
