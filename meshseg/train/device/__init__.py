"""Where and how the steps compute: tf.distribute strategies and the cluster of a
multi-worker run (`distribute`), the dtype policy of `precision=auto` (`precision`) and the
ops of a step without a GPU kernel (`gpu_kernels`)."""
