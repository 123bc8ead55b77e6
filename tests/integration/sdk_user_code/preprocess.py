"""A ScriptProcessor script as a SageMaker user writes it: nothing in it knows this platform.

Reads every CSV under /opt/ml/processing/input/raw, scales the features by --scale, and writes
the scaled rows plus a small summary to /opt/ml/processing/output/scaled.
"""

import argparse
import glob
import json
import os

parser = argparse.ArgumentParser()
parser.add_argument("--scale", type=float, default=1.0)
args = parser.parse_args()

rows = []
for path in sorted(glob.glob("/opt/ml/processing/input/raw/**/*.csv", recursive=True)):
    with open(path) as handle:
        header = handle.readline().strip().split(",")
        for line in handle:
            values = line.strip().split(",")
            rows.append([float(v) * args.scale for v in values[:-1]] + [values[-1]])

out = "/opt/ml/processing/output/scaled"
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "scaled.csv"), "w") as handle:
    handle.write(",".join(header) + "\n")
    handle.writelines(",".join(str(v) for v in row) + "\n" for row in rows)
with open(os.path.join(out, "summary.json"), "w") as handle:
    json.dump({"script": "sdk_user_code/preprocess.py", "rows": len(rows), "scale": args.scale}, handle)
