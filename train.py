"""Train the mesh segmentation demo network: `python train.py [overrides]` (Hydra).

Examples:
  python train.py                                   # bundled RNA sample, defaults
  python train.py impl=sparse_matmul jit=true
  python train.py -m impl=gather_sum,sparse_matmul jit=false,true
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import hydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from omegaconf import DictConfig  # noqa: E402


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> float:
    from meshseg.app import run

    summary = run(cfg, HydraConfig.get().runtime.output_dir)
    return summary["eval_accuracy"]


if __name__ == "__main__":
    main()
