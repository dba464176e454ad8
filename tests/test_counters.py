"""The per-source counters are declared once (primus.records.counters): the proto that carries them agrees field by field."""

from __future__ import annotations

from google.protobuf.descriptor import FieldDescriptor

from primus.records.counters import CARRIED, COUNTERS, DERIVED, NAMES, REPORTED, WASTE, SourceAccount, summed
from primus.v1 import common_pb2, planner_pb2
from services.planner.accounts import WorkDone, accept

NOT_COUNTERS = ("source", "pending_rows")  # SourceStats' own: whose counters, and the source's lag (not a cost)


def test_source_stats_carries_every_counter_in_order_with_its_type() -> None:
    carried = [f for f in common_pb2.SourceStats.DESCRIPTOR.fields if f.name not in NOT_COUNTERS]
    assert [f.name for f in carried] == list(NAMES)
    for proto_field, declared in zip(carried, COUNTERS, strict=True):
        expected = FieldDescriptor.TYPE_DOUBLE if declared.real else FieldDescriptor.TYPE_INT64
        assert proto_field.type == expected, f"SourceStats.{proto_field.name}: the proto's type disagrees with primus.records.counters"


def test_every_counter_says_what_it_is_and_waste_is_named_so() -> None:
    assert all(c.description.endswith(".") and len(c.description) > 20 for c in COUNTERS)
    assert set(WASTE) == {n for n in NAMES if n.startswith("wasted_")}
    assert set(CARRIED) | set(DERIVED) == set(NAMES) and not set(CARRIED) & set(DERIVED)
    assert set(DERIVED) == {"samples", "tasks_done", "tasks_quarantined"}, "what a restarted ledger learns again from its tasks"


def test_an_account_goes_into_the_proto_whole() -> None:
    account = SourceAccount(**{c.name: (1.5 if c.real else i + 1) for i, c in enumerate(COUNTERS)})
    stats = common_pb2.SourceStats(source="clicks", **vars(account))
    assert {n: getattr(stats, n) for n in NAMES} == vars(account)


def test_summed_adds_up_every_counter() -> None:
    one = SourceAccount(**{c.name: (0.5 if c.real else i + 1) for i, c in enumerate(COUNTERS)})
    total = summed([one, one, SourceAccount()])
    assert vars(total) == {n: 2 * v for n, v in vars(one).items()} and vars(summed([])) == vars(SourceAccount())


def test_a_reported_counter_is_a_field_of_the_attempts_report_and_an_accepted_one_adds_it() -> None:
    assert set(REPORTED) == {"records_quarantined", "labels_joined", "records_non_finite_dense", "records_label_out_of_domain", "values_filled_non_finite"}
    report_fields = {f.name for f in planner_pb2.TaskStats.DESCRIPTOR.fields}
    assert set(REPORTED) <= report_fields and set(REPORTED) <= set(WorkDone.__dataclass_fields__)
    account = SourceAccount(records_quarantined=1)
    accept(account, WorkDone(rows=9, bytes_read=100, **{name: i + 2 for i, name in enumerate(REPORTED)}))
    assert {name: getattr(account, name) for name in REPORTED} == {name: i + 2 + (name == "records_quarantined") for i, name in enumerate(REPORTED)}
    assert (account.samples, account.bytes_read) == (0, 0), "rows and bytes are charged, not accepted"
