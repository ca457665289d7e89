"""llm_algo.references.layouts: every operand of a kernel check in a layout of its own, with the same values."""

import pytest
import torch

from llm_algo.references.layouts import LAYOUTS, distinct_layouts, expect_own_layouts, with_layout


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("shape", [(7,), (5, 9), (2, 3, 4, 6)])
def test_each_layout_keeps_the_values_and_is_not_contiguous(layout, shape):
    t = torch.randn(shape)
    view = with_layout(t, layout)
    assert view.shape == t.shape and torch.equal(view, t)
    assert not view.is_contiguous()


def test_integer_tensors_keep_their_dtype():
    t = torch.randint(0, 50, (4, 6), dtype=torch.int32)
    for layout in LAYOUTS:
        view = with_layout(t, layout)
        assert view.dtype == torch.int32 and torch.equal(view, t)


def test_distinct_layouts_give_equal_shapes_different_strides():
    q, k, v = (torch.randn(2, 3, 5, 8) for _ in range(3))
    lq, lk, lv = distinct_layouts(q, k, v)
    assert torch.equal(lq, q) and torch.equal(lk, k) and torch.equal(lv, v)
    expect_own_layouts(lq, lk, lv)
    assert len({lq.stride(), lk.stride(), lv.stride()}) == 3


def test_many_operands_stay_distinct():
    ts = [torch.randn(4, 6) for _ in range(9)]
    views = distinct_layouts(*ts)
    expect_own_layouts(*views)
    assert all(torch.equal(a, b) for a, b in zip(views, ts, strict=True))


def test_a_kernel_that_borrows_strides_is_caught():
    """The mistake the guard exists for: reading V through K's strides. With contiguous operands it is right; with
    distinct layouts it reads the wrong elements."""

    def borrowed_strides_sum(k, v):  # 'kernel': walks v's storage with k's strides
        flat = v.as_strided(v.shape, k.stride(), v.storage_offset())
        return k + flat

    k, v = torch.randn(5, 8), torch.randn(5, 8)
    assert torch.equal(borrowed_strides_sum(k, v), k + v)  # the usual check passes it
    lk, lv = distinct_layouts(k, v, order=("padded", "fused_slice"))
    assert not torch.allclose(borrowed_strides_sum(lk, lv), k + v)


def test_own_layouts_refuses_shared_strides():
    a, b = torch.randn(4, 6).T, torch.randn(4, 6).T
    with pytest.raises(AssertionError, match="share"):
        expect_own_layouts(a, b)
    with pytest.raises(AssertionError, match="contiguous"):
        expect_own_layouts(torch.randn(3, 3))


def test_refuses_non_tensors_and_unknown_layouts():
    with pytest.raises(TypeError):
        distinct_layouts(torch.randn(3), [1, 2, 3])
    with pytest.raises(ValueError, match="unknown layout"):
        with_layout(torch.randn(3), "diagonal")


def test_several_vectors_get_strides_of_their_own():
    vectors = [torch.randn(9) for _ in range(5)]
    views = distinct_layouts(*vectors)
    expect_own_layouts(*views)
    assert all(torch.equal(a, b) for a, b in zip(views, vectors, strict=True))
