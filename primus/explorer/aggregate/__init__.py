"""Pure views of one run's spans and report, one module per view (cost, tasks, timeline, graph, waterfall, jobs), over
the run's index and its filters; the names the explorer's server uses are gathered here."""

from primus.explorer.aggregate.cost import CostView, ServiceRow, SourceRow, cost_view, service_rows
from primus.explorer.aggregate.filters import MAX_BUCKETS, MAX_PAGE, TASK_SORTS, TASK_STATES, FilterError, Filters, filter_spans, int_param, parse_filters
from primus.explorer.aggregate.graph import GraphCell, TaskGraph, dependency_edges, task_graph
from primus.explorer.aggregate.index import RunIndex, SourceSpec, TaskAttempt, TaskRow, build_index, build_tasks
from primus.explorer.aggregate.jobs import report_figures
from primus.explorer.aggregate.tasks import Page, paginate, task_rows
from primus.explorer.aggregate.timeline import Series, Timeline, timeline
from primus.explorer.aggregate.waterfall import EventDetail, SpanDetail, TraceSummary, Waterfall, WaterfallRow, span_detail, traces, waterfall

__all__ = [
    "MAX_BUCKETS",
    "MAX_PAGE",
    "TASK_SORTS",
    "TASK_STATES",
    "CostView",
    "EventDetail",
    "FilterError",
    "Filters",
    "GraphCell",
    "Page",
    "RunIndex",
    "Series",
    "ServiceRow",
    "SourceRow",
    "SourceSpec",
    "SpanDetail",
    "TaskAttempt",
    "TaskGraph",
    "TaskRow",
    "Timeline",
    "TraceSummary",
    "Waterfall",
    "WaterfallRow",
    "build_index",
    "build_tasks",
    "cost_view",
    "dependency_edges",
    "filter_spans",
    "int_param",
    "paginate",
    "parse_filters",
    "report_figures",
    "service_rows",
    "span_detail",
    "task_graph",
    "task_rows",
    "timeline",
    "traces",
    "waterfall",
]
