"""meshseg: train and compare feature-steered graph convolution networks for mesh segmentation."""

__version__ = "0.1.0"
