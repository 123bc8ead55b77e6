"""A Keras image classifier, written the way a SageMaker TensorFlow user writes it.

Runs unchanged on AWS's TensorFlow training containers and on this platform's image:
hyperparameters arrive as command-line arguments, the data in ``SM_CHANNEL_TRAINING`` (one
sub-directory per class of JPEG/PNG files), and the model goes to ``SM_MODEL_DIR``. On this
platform it also uses ``trainer.toolkit`` (when present) for the distribution strategy, resume
after a spot interruption, and the metric lines the stacks chart.

    python -m scripts.launch --source-dir training_image/examples/keras_image_classifier \\
        --entry-point train.py --hp epochs=3 --hp batch-size=32
"""

import argparse
import os

import tensorflow as tf

try:  # the platform's helper library; the script still runs without it
    from trainer import toolkit
except ImportError:
    toolkit = None

keras = tf.keras  # Keras 3, or Keras 2 (tf-keras) when the job sets TF_USE_LEGACY_KERAS=1


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=0.003)
    parser.add_argument("--image-size", type=int, default=16)
    parser.add_argument("--model_dir", default=None)  # the SageMaker SDK passes an S3 URI here; unused
    parser.add_argument("--model-dir-local", default=os.environ.get("SM_MODEL_DIR", "/opt/ml/model"))
    parser.add_argument("--train", default=os.environ.get("SM_CHANNEL_TRAINING", os.environ.get("SM_CHANNEL_TRAIN")))
    return parser.parse_args()


def main():
    args = parse_args()
    if not args.train:
        raise SystemExit("no training data: declare a 'training' channel (SM_CHANNEL_TRAINING)")
    train = keras.utils.image_dataset_from_directory(
        args.train,
        image_size=(args.image_size, args.image_size),
        batch_size=args.batch_size,
        label_mode="int",
        shuffle=True,
        seed=7,
    )
    class_names = train.class_names
    num_classes = len(class_names)
    train = train.map(lambda x, y: (x / 255.0, y)).cache().prefetch(tf.data.AUTOTUNE)

    strategy = toolkit.strategy() if toolkit else tf.distribute.get_strategy()
    with strategy.scope():
        model = keras.Sequential(
            [
                keras.Input(shape=(args.image_size, args.image_size, 3)),
                keras.layers.Conv2D(16, 3, activation="relu"),
                keras.layers.MaxPooling2D(),
                keras.layers.Conv2D(32, 3, activation="relu"),
                keras.layers.GlobalAveragePooling2D(),
                keras.layers.Dense(num_classes),
            ]
        )
        model.compile(
            optimizer=keras.optimizers.Adam(args.learning_rate),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
    callbacks = toolkit.callbacks(batch_size=args.batch_size) if toolkit else []
    model.fit(train, epochs=args.epochs, callbacks=callbacks, verbose=2)

    os.makedirs(args.model_dir_local, exist_ok=True)
    model.save(os.path.join(args.model_dir_local, "model.keras"))
    with open(os.path.join(args.model_dir_local, "classes.txt"), "w") as handle:
        handle.write("\n".join(class_names) + "\n")


if __name__ == "__main__":
    main()
