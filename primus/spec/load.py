"""Reading a job: YAML text or a file to a TrainingJob, one-line errors naming the field path, relative paths resolved."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from primus.errors import SpecError
from primus.spec import spec_versions
from primus.spec.base import PLACEHOLDERS
from primus.spec.job import TrainingJob
from primus.spec.training import UserScript

_PLAIN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


def field_path(loc: tuple[int | str, ...]) -> str:
    """spec.a[0].b; a key that is not a plain name is quoted (['a key\\n']), so a problem stays one line."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif not _PLAIN_NAME.match(str(part)):
            path += f"[{str(part)!r}]"
        else:
            path += f".{part}" if path else str(part)
    return path or "(document)"


def error_message(error: Any) -> str:
    if error["type"] == "extra_forbidden":
        return "unknown field"
    if error["type"] == "missing":
        return "required field is missing"
    message = str(error["msg"]).removeprefix("Value error, ")
    given = error.get("input")
    if error["type"] != "value_error" and isinstance(given, str | int | float | bool):  # the validators' own messages name it
        return f"{message}, not {given!r}"
    return message


def parse_job(document: object) -> TrainingJob:
    """Validate a parsed YAML document of any version (primus.spec.spec_versions); raise SpecError with one line per
    problem, its field path in the document's own version."""
    if not isinstance(document, dict):
        raise SpecError(["(document): a TrainingJob must be a mapping with apiVersion, kind, metadata and spec"])
    version = spec_versions.V2 if document.get("apiVersion") == spec_versions.V2 else spec_versions.V1
    hub = spec_versions.v2_to_v1(document) if version == spec_versions.V2 else document
    try:
        job = TrainingJob.model_validate(hub)
    except ValidationError as exc:
        raise SpecError(spec_versions.problems_in(version, [f"{field_path(e['loc'])}: {error_message(e)}" for e in exc.errors()])) from None
    problems = _template_problems(job)
    if problems:
        raise SpecError(spec_versions.problems_in(version, problems))
    return job.model_copy(update={"api_version": version})


def _template_problems(job: TrainingJob) -> list[str]:
    """Batch file sources whose URI has no time placeholder: every slot of their range would read the same files.

    Only the files adapter renders the URI per slot; streams, tables and stores have their own URI forms."""
    problems = []
    fixed: dict[str, str] = {}
    for index, source in enumerate(job.spec.data.sources):
        if source.resolved_adapter != "files" or source.time_range is None or any(p in source.uri for p in PLACEHOLDERS):
            continue
        fixed[source.name] = source.uri
        where = f"spec.data.sources[{index}].uri: {source.uri!r} has no {{date}} or {{hour}}"
        if source.time_range.end is None:
            problems.append(f"{where} but the time range is open-ended, so the same files would be read again every day; add {{date}}/{{hour}} or give the range an end")
            continue
        slots = len({hour.date() for hour in source.time_range.hours()})  # without {hour}, one slot per day
        if slots > 1:
            problems.append(
                f"{where} but the time range spans {slots} slots (days), so the same files would be read {slots} times; "
                "add {date}/{hour} or narrow the range to one day"
            )
    held_out = job.spec.data.eval
    if held_out is not None and held_out.source in fixed:
        problems.append(
            f"spec.data.eval.source: source {held_out.source!r} has no {{date}} or {{hour}} in its uri, so the held-out slice would read the files it trains on"
        )
    return problems


MAX_SPEC_BYTES = 1 << 20  # far above any real job (the 10M-row Criteo example is 6 KiB); a bigger one is refused unparsed


YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's safe loader parses a spec about 7x faster


def load_job_text(text: str, origin: str = "spec") -> TrainingJob:
    """Parse and validate YAML text; anything that is not a YAML mapping is one line naming the origin. Each call
    parses: a job's stored text is read through primus.spec.cache, once per process."""
    return _parse_text(text, origin)


def _parse_text(text: str, origin: str) -> TrainingJob:
    if len(text) > MAX_SPEC_BYTES:
        raise SpecError([f"{origin}: not a job spec: {len(text):,} characters, above the {MAX_SPEC_BYTES:,} a TrainingJob may take (refused before parsing)"])
    try:
        document = _json_document(text)
        if document is None:
            document = yaml.load(text, Loader=YAML_LOADER)  # a safe loader: libyaml's when it is there
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or getattr(exc, "reason", None) or exc
        raise SpecError([f"{origin}:{where} not valid YAML: {' '.join(str(problem).split())}"]) from None
    if not isinstance(document, dict):
        kind = "empty" if document is None else f"a {type(document).__name__}"
        raise SpecError([f"{origin}: not a TrainingJob: the document is {kind}, not a mapping with apiVersion, kind, metadata and spec"])
    return parse_job(document)


def _json_document(text: str) -> Any:
    """A text that is a JSON object (TrainingJob.to_json: the spec services hand each other) read as JSON, the same
    document YAML would read, about 40x faster; None for anything else, which is read as YAML (and its errors said as
    YAML's)."""
    if not text.startswith("{"):
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def load_job_file(path: Path) -> TrainingJob:
    """Read, validate and resolve a job file: relative source paths resolve against its folder."""
    try:
        size = path.stat().st_size
        if size > MAX_SPEC_BYTES:
            raise SpecError([f"{path}: not a job spec: {size:,} bytes, above the {MAX_SPEC_BYTES:,} a TrainingJob may take (refused before reading it)"])
        data = path.read_bytes()
    except OSError as exc:
        raise SpecError([f"{path}: cannot read the job file ({exc.strerror})"]) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError([f"{path}: not a job spec: byte {exc.start} is not UTF-8 text (a YAML TrainingJob is UTF-8)"]) from None
    job = load_job_text(text, str(path))
    return resolve_paths(job, path.resolve().parent)


def _local_path(uri: str) -> Path | None:
    if uri.startswith("file://"):
        return Path(uri.removeprefix("file://"))
    if "://" in uri:
        return None
    return Path(uri)


def resolve_paths(job: TrainingJob, base: Path) -> TrainingJob:
    """Make local source URIs absolute file:// URIs and check that their fixed prefix exists."""
    problems: list[str] = []
    sources = []
    for index, source in enumerate(job.spec.data.sources):
        local = _local_path(source.uri)
        if local is None:
            sources.append(source)
            continue
        absolute = local if local.is_absolute() else (base / local)
        fixed = str(absolute).split("{", 1)[0]
        existing = Path(fixed) if fixed.endswith("/") or fixed == str(absolute) else Path(fixed).parent
        if not existing.exists():
            problems.append(f"spec.data.sources[{index}].uri: path {existing} does not exist (source {source.name!r})")
        sources.append(source.model_copy(update={"uri": f"file://{absolute}"}))
    training = job.spec.training
    if training.script is not None:
        training = training.model_copy(update={"script": _resolved_script(training.script, base, problems)})
    if training.model.working_dir is not None:
        folder = Path(training.model.working_dir)
        folder = folder if folder.is_absolute() else base / folder
        if not folder.is_dir():
            problems.append(f"spec.training.model.workingDir: {training.model.working_dir!r} is not a folder ({folder})")
        training = training.model_copy(update={"model": training.model.model_copy(update={"working_dir": str(folder.resolve())})})
    if problems:
        raise SpecError(problems)
    data = job.spec.data.model_copy(update={"sources": sources})
    return job.model_copy(update={"spec": job.spec.model_copy(update={"data": data, "training": training})})


def _resolved_script(script: UserScript, base: Path, problems: list[str]) -> UserScript:
    """The script and its working folder as absolute paths; a missing one is a problem naming the field and value."""
    path = Path(script.path) if Path(script.path).is_absolute() else base / script.path
    if not path.is_file():
        problems.append(f"spec.training.script.path: {script.path!r} is not a file (looked for {path})")
    working = None
    if script.working_dir is not None:
        working = Path(script.working_dir) if Path(script.working_dir).is_absolute() else base / script.working_dir
        if not working.is_dir():
            problems.append(f"spec.training.script.workingDir: {script.working_dir!r} is not a folder (looked for {working})")
    return script.model_copy(update={"path": str(path), "working_dir": str(working) if working is not None else None})
