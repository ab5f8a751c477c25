"""The small emulated model the torch adapter's tests share (import after ``pytest.importorskip("torch")``)."""

import torch

import fp8emu.torch as ft


def small_mlp(recipe="te-current", stack="h100"):
    """Linear(32, 32), ReLU, Linear(32, 32), seeded (torch.manual_seed(0)), emulated under ``recipe`` and ``stack``."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32))
    ft.emulate(model, recipe, stack)
    return model


def train_step(model, x):
    """One forward and backward of ``sum(y**2)``: (y, x's gradient, the parameters' gradients)."""
    x = x.clone().requires_grad_(True)
    y = model(x)
    y.pow(2).sum().backward()
    return y.detach(), x.grad, [p.grad.clone() for p in model.parameters()]
