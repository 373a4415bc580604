"""`splitbrain explore`: drawn fault schedules, judged, shrunk and de-duplicated (docs/explore.md)."""
