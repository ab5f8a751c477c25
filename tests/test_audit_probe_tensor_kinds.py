"""The probes name an operand or a layer input that is a meta or sparse tensor.

``exact_passes`` / ``layer_passes`` of a meta tensor raised torch's "Cannot copy out of meta tensor; no
data!", of a sparse one torch's "can't convert Sparse layout tensor to numpy"; ``capture`` of a model on
the meta device raised torch's "unknown device type for autocast in
get_autocast_dispatch_key_from_device_type", of a sparse input (which ``nn.Linear`` itself takes) the
dispatcher's "Could not run 'aten::view' with arguments from the 'SparseCPU' backend" and pages of
kernels.  None named the operand or the layer.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from fp8emu.torch import probes  # noqa: E402

W = np.ones((16, 16), np.float32)
DY = np.ones((16, 16), np.float32)


def _meta():
    return torch.empty(16, 16, device="meta")


def _sparse():
    return torch.eye(16).to_sparse()


@pytest.mark.parametrize("make, words", [(_meta, "meta tensor"), (_sparse, "sparse_coo tensor")])
@pytest.mark.parametrize("slot", ["x", "w", "dy"])
def test_exact_and_layer_passes_name_the_operand(make, words, slot):
    ops = {"x": np.ones((16, 16), np.float32), "w": W, "dy": DY}
    ops[slot] = make()
    with pytest.raises(TypeError, match=rf"^{slot} is a (torch\.)?{words}"):
        probes.exact_passes(ops["x"], ops["w"], None, ops["dy"])
    with pytest.raises(TypeError, match=rf"^{slot} is a (torch\.)?{words}"):
        probes.layer_passes(ops["x"], ops["w"], None, ops["dy"], "te-current", "h100")


def test_a_dense_float32_tensor_is_still_an_operand():
    x = torch.arange(256, dtype=torch.float32).reshape(16, 16) / 64
    got = probes.exact_passes(x, W, None, DY)["fprop"]
    assert np.array_equal(got, x.double().numpy() @ W.astype(np.float64).T)


def test_capture_of_a_model_on_the_meta_device_names_the_layer():
    with torch.device("meta"):
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 4))
    with pytest.raises(ValueError, match=r"the input of layer '0' is a meta tensor"):
        probes.capture(model, lambda m: m(torch.empty(4, 8, device="meta")).sum())


def test_capture_of_a_sparse_input_names_the_layer():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8))
    model(torch.eye(8).to_sparse())            # torch's own layer takes it
    with pytest.raises(ValueError, match=r"the input of layer '0' is a torch\.sparse_coo tensor"):
        probes.capture(model, lambda m: m(torch.eye(8).to_sparse()).sum())
