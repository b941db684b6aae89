"""Shape and dtype checks shared by the kernel entry points, with messages that say what was expected."""

from __future__ import annotations

import torch

FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def check_float(name: str, t: torch.Tensor) -> None:
    if t.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name} must be float32, bfloat16 or float16, got {t.dtype}")


def check_ndim(name: str, t: torch.Tensor, ndim: int, layout: str) -> None:
    if t.dim() != ndim:
        raise ValueError(f"{name} must be {layout} ({ndim} dims), got shape {tuple(t.shape)}")


def check_shape(name: str, t: torch.Tensor, shape: tuple[int, ...], layout: str) -> None:
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {layout} = {tuple(shape)}, got {tuple(t.shape)}")


def check_same_device(**tensors: torch.Tensor) -> None:
    devices = {name: t.device for name, t in tensors.items()}
    if len(set(devices.values())) > 1:
        raise ValueError(f"tensors must be on one device, got {devices}")


def check_last_dim_contiguous(**tensors: torch.Tensor) -> None:
    """The kernels index each tensor's last dim with unit stride; its other strides are free."""
    for name, t in tensors.items():
        if t.shape[-1] > 1 and t.stride(-1) != 1:
            raise ValueError(
                f"{name} must have a contiguous last dimension (stride 1), got strides {t.stride()}"
            )
