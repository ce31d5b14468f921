"""Train the mesh segmentation demo network: `python train.py [overrides]` (Hydra).

Examples:
  python train.py                                   # bundled RNA sample, defaults
  python train.py impl=sparse_matmul jit=true
  python train.py -m impl=gather_sum,sparse_matmul jit=false,true
  python train.py resume=outputs/<run dir>          # continue from its latest checkpoint
"""

import logging
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import hydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

import meshseg.config  # noqa: E402,F401  (registers the config schema)
from meshseg.distribute import configure_runtime  # noqa: E402
from meshseg.errors import Interrupted, MeshsegError  # noqa: E402

log = logging.getLogger("train")


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> float:
    run_dir = HydraConfig.get().runtime.output_dir
    try:
        # Threads and the distribution strategy are set before any TensorFlow op runs.
        strategy = configure_runtime(cfg.threads, cfg.strategy.name)
        from meshseg.app import run

        summary = run(cfg, run_dir, strategy)
    except MeshsegError as error:
        log.error("%s", error)
        if isinstance(error, Interrupted):
            overrides = [arg for arg in sys.argv[1:] if not arg.startswith("resume=")]
            log.error("resume with: python train.py %s resume=%s", " ".join(overrides),
                      cfg.resume or run_dir)
        sys.exit(error.exit_code)
    return summary["eval_accuracy"]


if __name__ == "__main__":
    main()
