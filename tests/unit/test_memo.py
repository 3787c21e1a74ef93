"""`ratekeeper._memo.Memo`: bounded, and kept when full rather than refilled without end."""

from __future__ import annotations

from ratekeeper._memo import Memo


def test_a_full_memo_keeps_its_entries_and_starts_afresh_after_four_times_its_size() -> None:
    memo: Memo[int, str] = Memo(3)
    for k in range(3):
        memo.put(k, str(k))
    assert dict(memo) == {0: "0", 1: "1", 2: "2"}
    for k in range(3, 3 + 11):  # 11 refused: kept as it was
        memo.put(k, str(k))
        assert dict(memo) == {0: "0", 1: "1", 2: "2"}
    memo.put(99, "99")  # the 12th refusal (4 x 3): a fresh memo holding the new entry
    assert dict(memo) == {99: "99"}
    for k in range(100, 200):
        memo.put(k, "x")
        assert len(memo) <= 3


def test_clearing_a_memo_restarts_its_count_of_refusals() -> None:
    memo: Memo[int, int] = Memo(1)
    memo.put(0, 0)
    for k in range(1, 4):  # 3 refusals of the 4 that would start it afresh
        memo.put(k, k)
    memo.clear()
    memo.put(10, 10)
    memo.put(11, 11)  # refused: the count started again at the clear
    assert dict(memo) == {10: 10}
