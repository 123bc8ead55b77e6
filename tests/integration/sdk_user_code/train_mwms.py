"""A MultiWorkerMirroredStrategy script as SageMaker TensorFlow users write it.

TF_CONFIG comes from the container (built from the job's hosts); every worker trains in step
(a custom loop: Keras 3's fit does not take a MultiWorkerMirroredStrategy dataset), the chief
(task 0) saves to SM_MODEL_DIR and the others to a scratch folder, as TensorFlow's multi-worker
guide says. The summary proves how many workers trained together.

On GPUs the strategy asks for NCCL: with the default CommunicationImplementation.AUTO, TensorFlow
(2.21) all-reduces over gRPC rings between hosts, never NCCL (docs/sagemaker-code.md).
"""

import argparse
import glob
import hashlib
import json
import os
import tempfile

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--model_dir", type=str)
args, _ = parser.parse_known_args()

# list_physical_devices does not start TensorFlow's runtime, which the strategy must configure first.
implementation = (tf.distribute.experimental.CommunicationImplementation.NCCL if tf.config.list_physical_devices("GPU")
                  else tf.distribute.experimental.CommunicationImplementation.AUTO)
strategy = tf.distribute.MultiWorkerMirroredStrategy(
    communication_options=tf.distribute.experimental.CommunicationOptions(implementation=implementation))
config = json.loads(os.environ["TF_CONFIG"])
rows = [np.loadtxt(p, delimiter=",", skiprows=1, ndmin=2) for p in sorted(glob.glob(os.environ["SM_CHANNEL_TRAINING"] + "/*.csv"))]
data = np.concatenate(rows).astype("float32")
x, y = data[:, :-1], data[:, -1].astype("int32")
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input(shape=(x.shape[1],)), tf.keras.layers.Dense(8, activation="relu"),
                                 tf.keras.layers.Dense(2)])
    optimizer = tf.keras.optimizers.SGD(0.05)
global_batch = args.batch_size * strategy.num_replicas_in_sync


def dataset_fn(context):
    data = tf.data.Dataset.from_tensor_slices((x, y)).shard(context.num_input_pipelines, context.input_pipeline_id)
    return data.batch(context.get_per_replica_batch_size(global_batch)).repeat()


iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))


@tf.function
def step(batch):
    def replica(features, labels):
        with tf.GradientTape() as tape:
            per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=model(features, training=True))
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica, args=batch), axis=None)


steps = args.epochs * max(1, len(x) // global_batch)
losses = [float(step(next(iterator))) for _ in range(steps)]
# Every worker ends with the same weights when they trained in step: the chief records their digest.
digest = hashlib.sha256(b"".join(np.ascontiguousarray(w).tobytes() for w in model.get_weights())).hexdigest()

chief = config["task"]["index"] == 0
target = os.environ["SM_MODEL_DIR"] if chief else tempfile.mkdtemp()
model.save(os.path.join(target, "model.keras"))
summary = {"script": "sdk_user_code/train_mwms.py", "replicas_in_sync": strategy.num_replicas_in_sync,
           "workers": config["cluster"]["worker"], "task": config["task"], "host": os.environ.get("SM_CURRENT_HOST"),
           "steps": steps, "loss": losses[-1], "digest": digest, "implementation": implementation.value}
for folder in {target, os.environ["SM_OUTPUT_DATA_DIR"]}:
    with open(os.path.join(folder, "summary.json"), "w") as handle:
        json.dump(summary, handle)
