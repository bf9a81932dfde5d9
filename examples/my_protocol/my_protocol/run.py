"""The ``smalldb`` run step: cbir's split, then the database cut to ``database_per_class`` per class."""

from __future__ import annotations

import numpy as np

from benchmark.protocol.cbir_run import CBIRRun
from my_protocol import PROTOCOL, SmallDatabaseSettings


class SmallDatabaseRun(CBIRRun):
    """cbir with at most ``settings.database_per_class`` database (= training) images per class."""

    def split(self) -> None:
        super().split()  # the seeded closed-set split: self.database_set, self.query_set
        settings: SmallDatabaseSettings = PROTOCOL.settings_of(self.config)
        labels = np.asarray(self.database_set.labels)
        per_class = [np.flatnonzero(labels == c)[: settings.database_per_class] for c in np.unique(labels)]
        keep = np.sort(np.concatenate(per_class))
        self.database_set = self.database_set.take(keep)
        self.split_info = {
            **self.split_info,
            "split": f"{self.split_info['split']}, cut to the first {settings.database_per_class} per class",
            "database_per_class": settings.database_per_class,
            "n_database_images": len(keep),
        }

    def notes(self) -> list[str]:
        n = PROTOCOL.settings_of(self.config).database_per_class
        return [*super().notes(), f"Small database: at most {n} training (= database) images per class."]
