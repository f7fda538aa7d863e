"""Recording real agents: an OpenAI-compatible reverse proxy that writes agent-session traces.

``agentload record --upstream URL --out DIR`` (``workload.cli.record``) serves
``RecordingProxy`` (``proxy.py``: bytes forwarded as read) and feeds each finished exchange
to the ``Recorder`` (``recorder.py``: the recording directory), which reads it
(``extract.py``), hashes the prompt's token blocks (``blocks.py``) and finds its session
(``sessions.py``). ``serve.py`` runs it all and owns the stop path; ``options.py`` holds
what was asked for and the event loop, ``pipes.py`` the pipes from proxy processes to the
recorder's, ``workers.py`` the proxy processes beyond the first (``--processes``).
"""

from workload.record.proxy import Exchange, RecordingProxy, Upstream, parse_upstream
from workload.record.recorder import CONTENT, EXCHANGES, SUMMARY, TRACE, check_out_dir
from workload.record.serve import RecordOptions, RecordThread, record

__all__ = [
    "CONTENT",
    "EXCHANGES",
    "SUMMARY",
    "TRACE",
    "Exchange",
    "RecordOptions",
    "RecordThread",
    "RecordingProxy",
    "Upstream",
    "check_out_dir",
    "parse_upstream",
    "record",
]
