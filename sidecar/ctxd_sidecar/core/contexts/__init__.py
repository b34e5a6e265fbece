"""Contexts: the durable, versioned working memory of each conversation.

A context is the record of one conversation: the root agent's own (``root``,
kind ROOT, always exists) and one per A2A contextId (kind CONVERSATION). It
holds the transcript, the summary block, the loaded skill set, the plan, the
last preflight verdict, token counters and bookkeeping (see
:class:`~ctxd_sidecar.core.contexts.model.ContextState`).

Modules, from the use cases down to the record:

* one module per use case: :mod:`.turns` (AppendTurn), :mod:`.reads`
  (GetContext: the request checked whole and the one ``read`` that picks
  the pager) over :mod:`.views` (paged and incremental reads in transcript
  order) and :mod:`.pagetoken` (the page token both pagers write),
  :mod:`.listing`, :mod:`.deletion` (with :mod:`.trash`: the deletion
  layout and its purge), :mod:`.expiry`, :mod:`.truncation` (TruncateContext and CreateContext),
  :mod:`.compaction` (plan, apply, compact) with :mod:`.planref` (its
  stateless plan reference), :mod:`.auto` (the automatic trigger),
  :mod:`.cachefx` (its cache effect), :mod:`.redaction` (what leaves for a
  summariser) and :mod:`.compaction_report` (its fidelity, log line, metrics),
  :mod:`.planning` (plan and preflight), :mod:`.skillset`, :mod:`.usage`
  (RecordUsage, with :mod:`.cacheuse`: the prompt cache's figures);
* :mod:`.service`: the record keeper (load, catch up, read, watch, with
  :mod:`.follow` following other replicas for watchers);
  :mod:`.transaction`: the one commit protocol every change goes through;
* :mod:`.history` (earlier versions: GetContext ``at_version``, ListVersions)
  and :mod:`.forks` (ForkContext, copy-on-write; :mod:`.lineage`: the keys
  tying forks to their ancestors);
* beside them: :mod:`.checkpoints` (background segment + head writes),
  :mod:`.archive` (compaction records, ExpandCompaction), :mod:`.events`
  (the feed listeners and watchers follow), :mod:`.janitor` (background
  clean-up), :mod:`.registry` (the in-memory LRU);
* the stored form: :mod:`.persistence` (the layout below), :mod:`.head`
  (a head's fields), :mod:`.retention` (what a head keeps and lets go),
  :mod:`.segments` (a sealed segment's columns);
* the parts: :mod:`.ops` (log records and how they apply), :mod:`.calls`
  (tool calls and their results), :mod:`.tokens` (estimates, model windows,
  calibration), :mod:`.validate` (input checks), and :mod:`.model` (the
  record and its messages).

Durable layout
==============

Keys are relative to the instance namespace; ``<id>`` is the context id,
``<gen>`` a random incarnation tag, numbers are zero-padded to 12 digits::

    contexts/<id>                       head
    context-log/<id>/<gen>/<version>    log record of one versioned change
    context-seg/<id>/<gen>/<first>.<v>  sealed segment of messages
    context-trash/<id>~<gen>            a deletion in progress
    context-hist/<id>/<gen>/<version>   a copy of the head (contexts.history_ttl)

**One write per turn.** Every versioned change (a turn; later compaction,
plan, skills, preflight) is one create-only write (``if_absent``) of its log
record, ``context-log/<id>/<gen>/<version>``. That write is the commit: it
is durable when the call returns (LMDB commits with fsync; S3 acknowledged
the PUT), it is atomic (one put, so a half-written turn is never visible),
and it is where concurrent writers are serialised — if another sidecar
sharing the bucket already made that version, the write fails, the writer
catches up from the log and retries (or answers ABORTED when the caller
gave ``expected_version``). Its cost does not depend on the history: the
record holds only the change.

**Checkpoints** run in the background after the reply, per context and one
at a time, every ``contexts.checkpoint_every`` versions or
``contexts.checkpoint_bytes`` of new messages, when a context leaves the
cache, and on shutdown:

1. the messages appended since the last checkpoint go into a new, immutable
   *segment*;
2. the *head* is rewritten, conditional on the head version last read or
   written: every non-message field (summary, plan, skills, preflight,
   counters, calibration, recent idempotency keys, the segment list, the
   first live message) as of version V;
3. the log records up to V are overwritten by a small "sealed" marker. The
   marker (rather than a delete) keeps the key taken, so a writer with a
   stale copy can never re-create an old version; it also tells a reader
   that read an older head to read the head again. This clean-up is not
   needed for correctness, so it runs in the :mod:`.janitor`, which yields
   to turns; the head records how far it got (``swept_through``) and a
   restore resumes it.

Nothing the head names is deleted before a newer head stops naming it, and
a segment written by a checkpoint that crashed before its head write is
simply never named (overwritten by the next checkpoint or removed with the
context).

**Restore** reads the head, then its segments and the log records V+1,
V+2, ... up to the first missing one (in parallel batches on remote
stores), and replays the records with the same handlers that applied them
live (:mod:`.ops`). Listing needs no segments: the head carries the
counters, and the log tail updates them.

**Creation** writes the head at version 0 before the first record (after
adding the id to the ``contexts`` key index on stores without LIST). A head
at version 0 with no record (a crash in between) is not a context: it is
neither listed nor returned, and the next turn reuses it.

**Deletion** writes a trash record (what to remove), deletes the head
(conditional: the context vanishes at once), drops it from the index, then
the janitor removes log records and segments and finally the trash record.
A deletion interrupted by a crash is finished at the next start. (On a
store without LIST, a segment written by a checkpoint that crashed before
its head write is named nowhere and stays behind.)

**Several sidecars on one bucket** serialise on the create-only log write,
and a writer whose cached copy is behind catches up from the log when its
write loses (or when a caller's ``expected_version`` is ahead of it). Reads
are served from the cache and may lag another sidecar's writes until the
next write. Deleting a context while another sidecar is still appending to
it can lose that sidecar's turn.
Because a new incarnation gets a new ``<gen>``, a context created again
under the same id never meets the old one's keys.

Idempotency keys (the last ``contexts.idempotency_keys`` per context) are
stored with their first result in the log record and the head, so a retried
key returns the first result with ``replayed`` set, after a restart too.

Message ids are ``m<seq>`` from a per-context sequence that never reuses a
number (compaction folds messages away; their numbers are not reused).

Context ids: ``root`` or 1-128 characters of ``[A-Za-z0-9._:-]`` starting
with a letter or digit.
"""

from ctxd_sidecar.core.contexts.events import ContextEvent, EventFeed, WatchEvent
from ctxd_sidecar.core.contexts.model import (
    ROOT_ID,
    ContextInfo,
    ContextState,
    Msg,
    SkillRef,
    ToolCall,
)
from ctxd_sidecar.core.contexts.service import ContextService
from ctxd_sidecar.core.contexts.tokens import window_for_model
from ctxd_sidecar.core.contexts.turns import TurnRequest, TurnResult, Turns
from ctxd_sidecar.core.estimate import estimate_text

__all__ = [
    "ROOT_ID",
    "ContextEvent",
    "ContextInfo",
    "ContextService",
    "ContextState",
    "EventFeed",
    "Msg",
    "SkillRef",
    "ToolCall",
    "TurnRequest",
    "TurnResult",
    "Turns",
    "WatchEvent",
    "estimate_text",
    "window_for_model",
]
