"""The baseline's classifiers: scikit-learn's per vertex (`build_classifier`), or the
label transfer from the nearest training meshes (`NearestMeshTransfer`)."""

import numpy as np


def build_classifier(name: str, max_iter: int, seed: int):
    """An unfitted scikit-learn classifier: `hist_gradient_boosting` (max_iter boosting
    rounds, early stopping on 10% of the training vertices) or `mlp` (two hidden layers of
    256, Adam, standardised inputs, max_iter epochs with early stopping)."""
    if name == "hist_gradient_boosting":
        from sklearn.ensemble import HistGradientBoostingClassifier
        return HistGradientBoostingClassifier(max_iter=max_iter, random_state=seed)
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    return make_pipeline(StandardScaler(), MLPClassifier(
        hidden_layer_sizes=(256, 256), max_iter=max_iter,
        early_stopping=True, random_state=seed))


class NearestMeshTransfer:
    """Label transfer from the nearest training meshes: no learning, a test of how much a
    split's test meshes repeat its training meshes.

    `fit` keeps a k-d tree (`scipy.spatial.cKDTree`) of each training mesh's per-vertex
    features; `predict` scores every training mesh by the median distance from up to
    `probe` seeded test vertices to their nearest vertex of that mesh, and gives each test
    vertex the class of its nearest vertex in the best mesh. With xyz features (centred
    at the area-weighted centroid, unit area) that is the nearest-vertex label transfer
    from the training mesh that lies closest in the same coordinate frame. With
    `meshes` k > 1 each test vertex takes the majority of the classes transferred from
    the k best meshes (a tie goes to the class of the best mesh among those tied): the
    consensus of the near-copies rather than one of them. After `predict`,
    `last_distance` is that test mesh's distance to its nearest training mesh (the median
    probe distance, in the features' units).
    """

    def __init__(self, probe: int = 1000, seed: int = 0, meshes: int = 1):
        self.probe = probe
        self.seed = seed
        self.num_meshes = meshes
        self.meshes = []
        self.last_distance = None  # the last `predict`'s distance to its nearest mesh

    def fit(self, inputs: list[np.ndarray], classes: list[np.ndarray]) -> None:
        """inputs: float [V_i, C] per training mesh; classes: int [V_i] per training mesh."""
        from scipy.spatial import cKDTree
        self.meshes = [(cKDTree(mesh_inputs), mesh_classes)
                       for mesh_inputs, mesh_classes in zip(inputs, classes)]

    def predict(self, mesh_inputs: np.ndarray) -> np.ndarray:
        """int [V] classes of one test mesh's vertices, from float [V, C] features."""
        rng = np.random.default_rng(self.seed)
        probe = mesh_inputs[rng.choice(len(mesh_inputs), min(self.probe, len(mesh_inputs)),
                                       replace=False)]
        distances = [float(np.median(tree.query(probe)[0])) for tree, _ in self.meshes]
        self.last_distance = min(distances)
        transferred = []  # [V] classes from each of the best meshes, the best first
        for index in np.argsort(distances, kind="stable")[:self.num_meshes]:
            tree, mesh_classes = self.meshes[index]
            transferred.append(mesh_classes[tree.query(mesh_inputs)[1]])
        if len(transferred) == 1:
            return transferred[0]
        votes = np.zeros([len(mesh_inputs), int(max(map(np.max, transferred))) + 1])
        vertices = np.arange(len(mesh_inputs))
        for rank, mesh_classes in enumerate(transferred):
            # one vote each (one class per vertex and mesh: no index repeats); a nearer
            # mesh's weighs a hair more, so it wins a tie
            votes[vertices, mesh_classes] += 1.0 + 1e-3 * (len(transferred) - rank)
        return votes.argmax(axis=1)
