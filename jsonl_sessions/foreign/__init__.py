"""Other tools' session files and entries, mapped to and from transcript lines.

- :mod:`.claude_code`: Claude Code transcript entries (the lines of
  ``~/.claude/projects/<project>/<session>.jsonl``, which the Claude Agent SDK's session
  stores receive) <-> messages, and the store keys of Claude sessions.
- :mod:`.claude_sessions`: the operations of a Claude session store (append with
  ``uuid`` deduplication, load, list, delete, summaries) on any session backend.
- :mod:`.codex`: Codex CLI rollout files (``~/.codex/sessions/**/rollout-*.jsonl``).
- :mod:`.files`: reading foreign JSONL files tolerantly, writing one atomically.
- :mod:`.transfer`: ``import`` / ``export`` of whole sessions between those files and a store.

None of them needs a framework installed: the SDK adapter
(:mod:`jsonl_sessions.integrations.claude_agent_sdk`) and the command line build on them.
"""
