"""conv3d_dx.torch: the conv3d_input operator (against torch.nn.grad.conv3d_input, torch.library's opcheck,
torch.compile, gradcheck), the Conv3d swap on a small 3D U-Net block, and torch tensors through the
operator without copies."""

import copy
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.autograd.forward_ad as fwAD
from torch import nn

import conv3d_dx
import conv3d_dx.torch as cdx
from conv3d_dx import _core
from conv3d_dx.torch import Conv3d, conv3d_input, replace_conv3d


def problem(dtype=torch.float32, seed=0):
    """(x shape, weight, grad_output) of a grouped, strided, dilated convolution."""
    g = torch.Generator().manual_seed(seed)
    x_shape = [2, 4, 7, 8, 6]
    weight = torch.randn([6, 2, 3, 2, 3], generator=g).to(dtype)
    y = torch.nn.functional.conv3d(torch.zeros(x_shape), weight.float(), stride=(1, 2, 1), padding=(1, 0, 2),
                                   dilation=(2, 1, 1), groups=2)
    return x_shape, weight, torch.randn(y.shape, generator=g).to(dtype)


ARGS = dict(stride=(1, 2, 1), padding=(1, 0, 2), dilation=(2, 1, 1), groups=2)


def test_conv3d_input_matches_pytorch():
    x_shape, weight, grad = problem()
    expected = torch.nn.grad.conv3d_input(x_shape, weight.double(), grad.double(), **ARGS)
    got = conv3d_input(x_shape, weight, grad, **ARGS)
    assert got.dtype == torch.float32 and list(got.shape) == x_shape
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-5)
    # Asymmetric pads: the same as symmetric pads on a bigger input, cropped.
    pads = (1, 0, 0, 1, 2, 1)
    grad2 = torch.randn(2, 6, 4, 4, 7)
    full = conv3d_input([2, 4, 8, 9, 9], weight, grad2, stride=(1, 2, 1), padding=0, dilation=(2, 1, 1), groups=2)
    part = conv3d_input([2, 4, 7, 8, 6], weight, grad2, stride=(1, 2, 1), padding=pads, dilation=(2, 1, 1),
                        groups=2)
    torch.testing.assert_close(part, full[:, :, 1:8, 0:8, 2:8])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float8_e4m3fn])
def test_conv3d_input_low_precision(dtype):
    x_shape, weight, grad = problem(torch.float32)
    weight, grad = weight.to(dtype), grad.to(dtype)
    got = conv3d_input(x_shape, weight, grad, **ARGS)
    assert got.dtype == dtype
    exact = torch.nn.grad.conv3d_input(x_shape, weight.double(), grad.double(), **ARGS)
    # One rounding of a sum accurate to fp32.
    torch.testing.assert_close(got.double(), exact.to(dtype).double(), rtol=0.13, atol=0)


def test_torch_tensors_without_copies(monkeypatch):
    seen = []
    real = _core.backprop_input

    def spy(*args, **kwargs):
        result = real(*args, **kwargs)
        seen.append(result[1])
        return result

    monkeypatch.setattr(_core, "backprop_input", spy)
    x_shape, weight, grad = problem()
    dy = grad.permute(0, 2, 3, 4, 1).contiguous()  # NDHWC
    out = torch.full(x_shape, -1.0).permute(0, 2, 3, 4, 1)  # an NDHWC view of NCDHW memory
    w = weight.requires_grad_()  # leaves that require grad are read too
    result = conv3d_dx.conv3d_backprop_input_v2([2, 7, 8, 6, 4], w, dy, [1, 1, 2, 1, 1], [1, 1, 0, 0, 2, 2],
                                                [1, 2, 1, 1, 1], 2, out=out)
    assert result is out
    assert seen[-1] == (dy.data_ptr(), w.data_ptr(), out.data_ptr())
    expected = torch.nn.grad.conv3d_input(x_shape, weight.detach(), grad, **ARGS)
    torch.testing.assert_close(out.permute(0, 4, 1, 2, 3), expected, rtol=1e-5, atol=1e-5)
    # channels_last_3d tensors through the torch operator, and a slice: all read where they lie.
    seen.clear()
    grad_cl = grad.contiguous(memory_format=torch.channels_last_3d)
    w_cl = weight.detach().contiguous(memory_format=torch.channels_last_3d)
    got = conv3d_input(x_shape, w_cl, grad_cl, **ARGS)
    assert seen[-1][:2] == (grad_cl.data_ptr(), w_cl.data_ptr()) and seen[-1][2] == got.data_ptr()
    assert got.is_contiguous(memory_format=torch.channels_last_3d)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    big = torch.randn([2, 12, 5, 4, 8])
    sliced = big[:, ::2]
    conv3d_input([2, 4, 7, 8, 6], weight.detach(), sliced, **ARGS)
    assert seen[-1][0] == sliced.data_ptr()


def vm_flags_at(address):
    """The VmFlags of the mapping holding `address`, from /proc/self/smaps."""
    inside = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(v, 16) for v in head.split("-"))
                inside = lo <= address < hi
            elif inside and head == "VmFlags:":
                return line.split()[1:]
    return None


@pytest.mark.skipif(not os.path.exists("/sys/kernel/mm/transparent_hugepage/enabled"),
                    reason="no transparent huge pages (not Linux, or a kernel without them)")
@pytest.mark.parametrize("layout", ["NCDHW", "NDHWC", "NCDHW channels_last_3d"])
def test_large_torch_results_ask_for_huge_pages(layout, monkeypatch):
    # 8 MiB of y from a 1 x 1 x 1 kernel; where advice is on (here forced), its whole 2 MiB units are advised
    # (VmFlags "hg"), like numpy's. Each layout is one of allocate()'s torch branches: contiguous NCDHW or
    # NDHWC, and channels_last_3d kept for an NCDHW call whose dy is.
    monkeypatch.setattr(conv3d_dx._arrays, "ADVISE_HUGE_PAGES", True)
    weight = torch.randn([3, 32, 1, 1, 1])
    grad = torch.randn([1, 3, 16, 64, 64])
    if layout == "NCDHW":
        got = conv3d_input([1, 32, 16, 64, 64], weight, grad)
    elif layout == "NDHWC":
        got = conv3d_dx.conv3d_backprop_input_v2([1, 16, 64, 64, 32], weight.permute(0, 2, 3, 4, 1),
                                                 grad.permute(0, 2, 3, 4, 1).contiguous(), [1] * 5, [0] * 6,
                                                 filter_format="NDHWC").permute(0, 4, 1, 2, 3)
    else:
        grad_cl = grad.contiguous(memory_format=torch.channels_last_3d)
        got = conv3d_dx.conv3d_backprop_input_v2([1, 32, 16, 64, 64], weight, grad_cl, [1] * 5, [0] * 6,
                                                 data_format="NCDHW")
        assert not got.is_contiguous() and got.is_contiguous(memory_format=torch.channels_last_3d)
    assert got.numel() * got.element_size() >= conv3d_dx._arrays.HUGE_PAGE_RESULT_BYTES
    unit = 2 << 20
    first_unit = -(-got.data_ptr() // unit) * unit
    flags = vm_flags_at(first_unit)
    assert flags is not None and "hg" in flags, flags
    torch.testing.assert_close(got, torch.nn.grad.conv3d_input(got.shape, weight, grad), rtol=1e-5, atol=1e-5)


def test_huge_page_advice_can_be_turned_off(monkeypatch):
    advised = []
    monkeypatch.setattr(_core, "advise_huge_pages", advised.append)
    monkeypatch.setattr(conv3d_dx._arrays, "ADVISE_HUGE_PAGES", True)
    args = ([1, 32, 16, 64, 64], torch.randn([3, 32, 1, 1, 1]), torch.randn([1, 3, 16, 64, 64]))
    conv3d_input(*args)
    assert len(advised) == 1
    monkeypatch.setattr(conv3d_dx._arrays, "ADVISE_HUGE_PAGES", False)
    conv3d_input(*args)
    assert len(advised) == 1
    # The switch is read from the environment when the module is imported.
    read = "import conv3d_dx._arrays as a; print(a.ADVISE_HUGE_PAGES)"
    for value, expected in (("0", "False"), ("1", "True")):
        env = dict(os.environ, CONV3D_DX_MADVISE_HUGEPAGE=value)
        out = subprocess.run([sys.executable, "-c", read], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.strip() == expected, out
    env = {k: v for k, v in os.environ.items() if k != "CONV3D_DX_MADVISE_HUGEPAGE"}
    out = subprocess.run([sys.executable, "-c", read], env=env, capture_output=True, text=True, check=True)
    defrag = conv3d_dx._arrays._read_defrag()
    assert out.stdout.strip() == str(conv3d_dx._arrays.advice_pays(None, defrag)), (out, defrag)


def test_huge_page_advice_by_default_only_where_faults_do_not_compact():
    pays = conv3d_dx._arrays.advice_pays
    for chosen, advised in (("always", False), ("defer", True), ("defer+madvise", False), ("madvise", False),
                            ("never", True)):
        text = " ".join(f"[{v}]" if v == chosen else v
                        for v in ("always", "defer", "defer+madvise", "madvise", "never")) + "\n"
        assert pays(None, text) is advised, text
        assert pays("1", text) and not pays("0", text)
    assert not pays(None, None) and not pays(None, "garbled")


def test_conv3d_input_bad_arguments():
    x_shape, weight, grad = problem()
    with pytest.raises(TypeError, match="grad_output|out_backprop has element type torch.float64"):
        conv3d_input(x_shape, weight.double(), grad.double(), **ARGS)
    with pytest.raises(ValueError, match="padding has 4 values"):
        conv3d_input(x_shape, weight, grad, padding=(1, 1, 1, 1))
    with pytest.raises(ValueError, match="out_backprop H is 4 but .* imply 7") as info:
        conv3d_input(x_shape, weight, grad, stride=1, padding=(1, 0, 2), dilation=(2, 1, 1), groups=2)
    assert info.value.parameter == "out_backprop"
    with pytest.raises(ValueError, match="out_backprop is on meta"):
        conv3d_dx.conv3d_backprop_input_v2([1, 2, 2, 2, 1], torch.ones(1, 1, 1, 1, 1),
                                           torch.ones(1, 2, 2, 2, 1, device="meta"), [1] * 5, [0] * 6)


def test_only_calls_that_need_the_operator_dispatch_it(monkeypatch):
    """Plain eager calls autograd does not record (inference, a backward pass's own) run the implementation
    directly; calls autograd records and tensor subclasses go through the registered operator, and both
    give the same values."""
    x_shape, weight, grad = problem()
    dispatched = []
    operator = cdx._conv3d_input

    def spy(*args):
        dispatched.append(args)
        return operator(*args)

    monkeypatch.setattr(cdx, "_conv3d_input", spy)
    direct = conv3d_input(x_shape, weight, grad, **ARGS)
    assert not dispatched
    with torch.no_grad():
        conv3d_input(x_shape, weight.requires_grad_(), grad, **ARGS)
    assert not dispatched
    recorded = conv3d_input(x_shape, weight, grad, **ARGS)
    assert len(dispatched) == 1 and recorded.grad_fn is not None
    assert torch.equal(recorded.detach(), direct)
    weight.requires_grad_(False)

    class Sub(torch.Tensor):
        pass

    conv3d_input(x_shape, weight.as_subclass(Sub), grad, **ARGS)
    assert len(dispatched) == 2
    # The swapped Conv3d's input gradient is taken in its backward pass, which autograd does not record
    # unless asked to (create_graph), as double backward needs.
    layer = Conv3d(4, 6, 3, padding=1)
    x = torch.randn(1, 4, 3, 4, 3, requires_grad=True)
    layer(x).sum().backward()
    assert len(dispatched) == 2
    (gx,) = torch.autograd.grad(layer(x).square().sum(), x, create_graph=True)
    assert len(dispatched) == 3
    gx.sum().backward()


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:FutureWarning")  # torch's make_dual
def test_forward_mode_ad():
    """Tangents through conv3d_input (bilinear in weight and grad_output) against PyTorch's own input
    gradient's, for a tangent on either input or both."""
    x_shape, weight, grad = problem()
    w_t, g_t = torch.randn_like(weight), torch.randn_like(grad)
    for tangents in ((w_t, None), (None, g_t), (w_t, g_t)):
        with fwAD.dual_level():
            w = weight if tangents[0] is None else fwAD.make_dual(weight, tangents[0])
            g = grad if tangents[1] is None else fwAD.make_dual(grad, tangents[1])
            got = fwAD.unpack_dual(conv3d_input(x_shape, w, g, **ARGS))
            want = fwAD.unpack_dual(torch.nn.grad.conv3d_input(x_shape, w, g, **ARGS))
        torch.testing.assert_close(got.primal, want.primal, rtol=1e-5, atol=1e-5)
        assert got.tangent is not None
        torch.testing.assert_close(got.tangent, want.tangent, rtol=1e-5, atol=1e-5)


def test_opcheck():
    """Schema, fake (meta) kernel, autograd registration and AOT dispatch of the registered operator."""
    x_shape, weight, grad = problem()
    for w, g in ((weight, grad), (weight.contiguous(memory_format=torch.channels_last_3d),
                                  grad.contiguous(memory_format=torch.channels_last_3d))):
        args = (x_shape, w.requires_grad_(), g.requires_grad_(), [1, 2, 1], [1, 1, 0, 0, 2, 2], [2, 1, 1], 2)
        torch.library.opcheck(torch.ops.conv3d_dx.conv3d_input.default, args)


@pytest.mark.filterwarnings("ignore:Input #:UserWarning")
def test_gradcheck():
    """conv3d-dx has no float64, so gradcheck runs in float32: every function here is linear in each
    argument, so central differences with a step of 1 are exact up to float32 rounding. fast_mode checks
    v^T J u for random u, v instead of all of J (the full Jacobian takes minutes here)."""
    torch.manual_seed(1)
    tolerances = dict(eps=1.0, atol=2e-3, rtol=2e-3, fast_mode=True)
    # conv3d_input's own gradients (in weight and grad_output), used for double backward.
    assert torch.autograd.gradcheck(
        lambda w, g: conv3d_input([1, 2, 5, 6, 5], w, g, stride=(1, 2, 1), padding=(1, 0, 0, 1, 2, 1),
                                  dilation=(2, 1, 1), groups=2),
        (torch.randn(4, 1, 2, 2, 3, requires_grad=True), torch.randn(1, 4, 4, 3, 6, requires_grad=True)),
        **tolerances)
    # The swapped Conv3d: its input gradient from conv3d-dx, asymmetric "same" padding and a stride.
    for layer in (Conv3d(4, 6, 2, padding="same", groups=2), Conv3d(4, 4, 3, stride=2, padding=1, bias=False)):
        x = torch.randn(1, 4, 3, 4, 3, requires_grad=True)
        assert torch.autograd.gradcheck(lambda x: layer(x), (x,), **tolerances)


class UNetBlock(nn.Module):
    """Encoder convs, a strided down-convolution, a grouped middle, a transposed up-convolution, a skip
    connection and decoder convs with dilation, asymmetric "same" padding and replicate padding."""

    def __init__(self, c: int = 4) -> None:
        super().__init__()
        self.enc = nn.Sequential(nn.Conv3d(2, c, 3, padding=1), nn.ReLU(), nn.Conv3d(c, c, 3, padding=1),
                                 nn.ReLU())
        self.down = nn.Conv3d(c, 2 * c, 2, stride=2)
        self.mid = nn.Sequential(nn.Conv3d(2 * c, 2 * c, 3, padding=1, groups=2), nn.ReLU())
        self.up = nn.ConvTranspose3d(2 * c, c, 2, stride=2)
        self.dec = nn.Sequential(nn.Conv3d(2 * c, c, 3, padding="same", dilation=2), nn.ReLU(),
                                 nn.Conv3d(c, c, 2, padding="same", padding_mode="replicate"), nn.ReLU(),
                                 nn.Conv3d(c, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e = self.enc(x)
        return self.dec(torch.cat([e, self.up(self.mid(self.down(e)))], 1))


def gradients(model, x, target):
    x = x.detach().clone().requires_grad_()
    model.zero_grad()
    (model(x) * target).sum().backward()
    # (torch.compile's wrapper prefixes the names with _orig_mod.)
    return x.grad, {name.replace("_orig_mod.", ""): p.grad.clone() for name, p in model.named_parameters()}


@pytest.mark.parametrize("channels_last", [False, True])
def test_unet_block_swap(channels_last):
    torch.manual_seed(0)
    reference = UNetBlock()
    swapped = replace_conv3d(copy.deepcopy(reference))
    assert sum(isinstance(m, Conv3d) for m in swapped.modules()) == 7
    x, target = torch.randn(2, 2, 8, 8, 8), torch.randn(2, 1, 8, 8, 8)
    if channels_last:
        reference, swapped = (m.to(memory_format=torch.channels_last_3d) for m in (reference, swapped))
        x = x.contiguous(memory_format=torch.channels_last_3d)
    calls = []
    real = cdx.conv3d_backprop_input_v2
    cdx.conv3d_backprop_input_v2 = lambda *a, **k: calls.append(1) or real(*a, **k)
    try:
        x_grad, grads = gradients(swapped, x, target)
    finally:
        cdx.conv3d_backprop_input_v2 = real
    assert len(calls) == 7  # one input gradient per Conv3d, the first one's included (x requires grad)
    x_ref, grads_ref = gradients(reference, x, target)
    torch.testing.assert_close(x_grad, x_ref, rtol=1e-4, atol=1e-5)
    for name in grads_ref:
        torch.testing.assert_close(grads[name], grads_ref[name], rtol=1e-4, atol=1e-5)


def test_out_outside_autograd():
    """out= is written outside autograd, as PyTorch's own out= arguments are: a tensor that requires grad is
    refused; any other has its version counter moved, so a backward that saved it refuses the new values."""
    x_shape, weight, grad = problem()
    args = ([2, 7, 8, 6, 4], weight, grad.permute(0, 2, 3, 4, 1), [1, 1, 2, 1, 1], [1, 1, 0, 0, 2, 2],
            [1, 2, 1, 1, 1], 2)
    leaf = torch.zeros([2, 7, 8, 6, 4], requires_grad=True)
    with pytest.raises(ValueError, match="out requires grad") as info:
        conv3d_dx.conv3d_backprop_input_v2(*args, out=leaf)
    assert info.value.parameter == "out"
    assert not leaf.detach().any()
    a = torch.randn([2, 7, 8, 6, 4], requires_grad=True)
    saved = a.exp()  # exp saves its result for backward
    with pytest.raises(ValueError, match="out requires grad"):
        conv3d_dx.conv3d_backprop_input_v2(*args, out=saved)
    plain = saved.detach()  # shares the memory and the version counter
    conv3d_dx.conv3d_backprop_input_v2(*args, out=plain)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        saved.sum().backward()
    plan = conv3d_dx.Plan(*args)
    for run in (lambda o: plan.execute(args[2], weight, out=o), lambda o: plan.execute_packed(args[2], out=o)):
        t = torch.zeros([2, 7, 8, 6, 4])
        version = t._version
        run(t)
        assert t._version > version


def test_conv3d_unbatched_and_autocast():
    """Conv3d takes what nn.Conv3d takes: an unbatched [C, D, H, W] input, and CPU autocast (the gradients
    taken in the autocast dtype, as the forward was, each returned in its input's dtype)."""
    torch.manual_seed(3)
    reference = nn.Conv3d(2, 3, 3, padding=1)
    swapped = replace_conv3d(copy.deepcopy(reference))

    def grads(layer, x, autocast):
        x = x.clone().requires_grad_()
        layer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            y = layer(x)
        y.float().square().sum().backward()
        return [x.grad, layer.weight.grad, layer.bias.grad]

    # Under autocast both round their bf16 results once: two bf16 ulps (2^-7) apart at most (measured: equal).
    for x, autocast, tol in ((torch.randn(2, 4, 5, 6), False, 1e-5), (torch.randn(1, 2, 4, 5, 6), True, 2**-7)):
        got, want = grads(swapped, x, autocast), grads(reference, x, autocast)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype == torch.float32 and g.shape == w.shape
            torch.testing.assert_close(g, w, rtol=tol, atol=tol)


def test_conv3d_refuses_what_it_cannot_differentiate():
    layer = Conv3d(2, 2, 3).double()
    with pytest.raises(TypeError, match="input is torch.float64"):
        layer(torch.randn(1, 2, 4, 4, 4, dtype=torch.float64, requires_grad=True))
    layer(torch.randn(1, 2, 4, 4, 4, dtype=torch.float64))  # no input gradient wanted: fine


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_torch_compile(backend):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = replace_conv3d(UNetBlock())
    x, target = torch.randn(1, 2, 8, 8, 8), torch.randn(1, 1, 8, 8, 8)
    expected_x, expected = gradients(model, x, target)
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    got_x, got = gradients(compiled, x, target)
    torch.testing.assert_close(got_x, expected_x)
    for name in expected:
        torch.testing.assert_close(got[name], expected[name])
    # The operator alone, with the default backend (inductor).
    x_shape, weight, grad = problem()
    op = torch.compile(lambda w, g: conv3d_input(x_shape, w, g, **ARGS), fullgraph=True)
    torch.testing.assert_close(op(weight, grad), conv3d_input(x_shape, weight, grad, **ARGS))
