"""``python -m trainer.user_code.ps_server``: this host's parameter server, until it is stopped.

What sagemaker-tensorflow-training's ``_run_ps`` starts beside the script on every host of a
``parameter_server`` job: a ``tf.distribute.Server`` for job ``ps`` and this host's task index,
from ``TF_CONFIG`` (the ps task's config), on the CPU (several TensorFlow processes on one GPU are
not safe; the variables are small). The runner stops it when the job ends.
"""

from __future__ import annotations

import json
import os
import sys


def main() -> int:
    config = json.loads(os.environ["TF_CONFIG"])
    task = config["task"]
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    import tensorflow as tf

    server = tf.distribute.Server(
        tf.train.ClusterSpec(config["cluster"]),
        job_name="ps",
        task_index=int(task["index"]),
        protocol="grpc",
        config=tf.compat.v1.ConfigProto(device_count={"GPU": 0}),
        start=True,
    )
    print(f"[trainer] parameter-server task={task['index']} address={config['cluster']['ps'][int(task['index'])]}", flush=True)
    server.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
