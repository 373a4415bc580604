"""`python -m splitbrain.node.contract`: write node/contract/events.schema.json from node/events.py."""

from . import EVENTS_SCHEMA, write_events_schema

write_events_schema()
print(f"wrote {EVENTS_SCHEMA}")
