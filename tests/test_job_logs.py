"""LogCursor: a job's log files read on from where the reader left off, a line being written held back, tails."""

from __future__ import annotations

from pathlib import Path

from services.master.logs import LogCursor


def test_lines_come_once_file_by_file_and_a_partial_line_waits(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "job-trainer-0.log").write_text("t1\nt2\n")
    (logs / "job-data_executor-0.log").write_text("e1\ne2 partial")
    cursor = LogCursor(logs)
    assert cursor.executors() == ["job-data_executor-0", "job-trainer-0"]
    assert cursor.read() == [("job-data_executor-0", "e1"), ("job-trainer-0", "t1"), ("job-trainer-0", "t2")]
    assert cursor.read() == [], "nothing new"
    with (logs / "job-data_executor-0.log").open("a") as log:
        log.write(" done\ne3\n")
    (logs / "job-data_executor-1.log").write_text("late\n")
    assert cursor.read() == [("job-data_executor-0", "e2 partial done"), ("job-data_executor-0", "e3"), ("job-data_executor-1", "late")]


def test_one_executor_and_a_tail(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_text("".join(f"a{i}\n" for i in range(10)))
    (tmp_path / "b.log").write_text("b0\n")
    cursor = LogCursor(tmp_path, only="a", tail=3)
    assert cursor.read() == [("a", "a7"), ("a", "a8"), ("a", "a9")]
    with (tmp_path / "a.log").open("a") as log:
        log.write("a10\n")
    assert cursor.read() == [("a", "a10")], "after the first read, every new line"


def test_a_missing_folder_has_no_logs(tmp_path: Path) -> None:
    cursor = LogCursor(tmp_path / "not-yet")
    assert cursor.executors() == [] and cursor.read() == []


def test_a_log_rewritten_shorter_is_read_again(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_text("one\ntwo\n")
    cursor = LogCursor(tmp_path)
    assert len(cursor.read()) == 2
    (tmp_path / "a.log").write_text("new\n")
    assert cursor.read() == [("a", "new")]
