"""GMS settings, validated. JGroups' defaults scaled down for tests (JGroups 5.x in brackets).

- `join_timeout` 1.0 s [GMS.join_timeout 2 s]: how long a joiner waits for JOIN_RSP, and how long a
  starting node looks for a coordinator before the lowest node it heard from forms a singleton;
- `max_join_attempts` 10 [GMS.max_join_attempts 10]: JOIN rounds before a node gives up and forms a
  singleton view (a merge joins it later);
- `discovery_timeout` 0.25 s [Discovery.timeout, 3 s in TCPPING's days]: one discovery round ends
  when every initial host answered, a coordinator answered, or after this long;
- `heartbeat_interval` 0.5 s [FD_ALL3.interval 8 s] and `fd_timeout` 2.0 s [FD_ALL3.timeout 40 s]:
  a member not heard from for fd_timeout is suspected (checked every heartbeat_interval);
- `merge_interval` 1.0 s [MERGE3.min_interval 10 s .. max_interval 30 s]: INFO to peers outside the
  view every merge_interval to 1.5 x merge_interval (random, seeded);
- `merge_timeout` 2.0 s [GMS.merge_timeout 5 s]: a merge leader waits this long for MERGE_RSPs.
- `view_ack_collection_timeout` 1.0 s [GMS.view_ack_collection_timeout 2 s]: a coordinator sends
  a joiner its JOIN_RSP once every other member acknowledged the join VIEW, or after this long.

With these defaults a member cut off for 5 s is suspected after 2-2.5 s (a 5 s partition changes
views) and a heal merges within about merge_interval x 1.5 + a few round trips + UNICAST3's recovery
of the messages queued behind the MERGE_REQ: under 10 s (tests/node/test_gms.py measures it).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar

from splitbrain.node.errors import SettingError

from ..settings import Settings


@dataclass(frozen=True, slots=True, kw_only=True)
class GmsConfig(Settings):
    OWNER: ClassVar[str] = "GMS"

    join_timeout: float = 1.0
    max_join_attempts: int = 10
    discovery_timeout: float = 0.25
    heartbeat_interval: float = 0.5
    fd_timeout: float = 2.0
    merge_interval: float = 1.0
    merge_timeout: float = 2.0
    view_ack_collection_timeout: float = 1.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value <= 0:
                raise SettingError(f.name, f"must be > 0, got {value!r}")
        if self.fd_timeout <= self.heartbeat_interval:
            raise SettingError(
                "fd_timeout", f"must be above heartbeat_interval ({self.heartbeat_interval}), got {self.fd_timeout}"
            )

    @property
    def recovery_bound_s(self) -> float:
        """GMS delivers no application data: it adds nothing to the protocol's recovery bound."""
        return 0.0

    @property
    def merge_bound_s(self) -> float:
        """From a heal to a merged view when nothing else is in the way: INFO within 1.5 merge
        intervals, a merge round of at most merge_timeout, and a heartbeat round."""
        return 1.5 * self.merge_interval + self.merge_timeout + self.heartbeat_interval
