"""Figures and tables of one run's predictions: per-class IoU, the confusion matrix and
meshes coloured by label (`label_colors`, the colours of the run's mesh summaries; used by
`meshseg.tools.predict` and `notebooks/evaluate.ipynb`). Figures are drawn on
`matplotlib.figure.Figure` (the Agg canvas), never through pyplot's global state."""

import io
from typing import Dict

import numpy as np
from matplotlib.figure import Figure
from mpl_toolkits.mplot3d.art3d import Poly3DCollection

from meshseg.train.logs.mesh_summaries import label_colors
from meshseg.train.loop.metrics import per_class_iou


def iou_table(confusion: np.ndarray) -> str:
    """Markdown table of the classes present: class, true vertices, predicted vertices, IoU."""
    iou = per_class_iou(confusion)
    rows = ["| class | true vertices | predicted vertices | IoU |", "| --- | --- | --- | --- |"]
    for k in np.flatnonzero(~np.isnan(iou)):
        rows.append(f"| {k} | {confusion[k].sum()} | {confusion[:, k].sum()} | {iou[k]:.4f} |")
    return "\n".join(rows)


def plot_confusion(confusion: np.ndarray) -> Figure:
    """Row-normalised confusion matrix (fraction of each true class), classes present only."""
    confusion = np.asarray(confusion, np.float64)
    present = np.flatnonzero(confusion.sum(0) + confusion.sum(1) > 0)
    matrix = confusion[np.ix_(present, present)]
    matrix = matrix / np.maximum(matrix.sum(1, keepdims=True), 1)
    fig = Figure(figsize=(6, 5), layout="constrained")
    ax = fig.add_subplot()
    image = ax.imshow(matrix, vmin=0, vmax=1, cmap="viridis")
    ticks = np.arange(len(present)) if len(present) <= 30 else []
    ax.set_xticks(ticks, [str(present[i]) for i in ticks])
    ax.set_yticks(ticks, [str(present[i]) for i in ticks])
    ax.set(xlabel="predicted class", ylabel="true class", title="confusion (row-normalised)")
    fig.colorbar(image, ax=ax, label="fraction of true class")
    return fig


def face_labels(triangles: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """int [T] label of each triangle: the label held by at least two of its vertices, else
    its first vertex's label."""
    corner = np.asarray(labels)[np.asarray(triangles)]
    return np.where(corner[:, 1] == corner[:, 2], corner[:, 1], corner[:, 0])


def render_mesh_labels(vertices: np.ndarray, triangles: np.ndarray,
                       panels: Dict[str, np.ndarray]) -> Figure:
    """Side-by-side 3-D views of one mesh, one per entry of `panels` {title: labels int [V]},
    triangles coloured by `face_labels` with `label_colors` and shaded by their normals
    (a light from above the viewer), the mesh filling each panel."""
    vertices = np.asarray(vertices, np.float64)
    corners = vertices[np.asarray(triangles)]
    normals = np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])
    normals /= np.maximum(np.linalg.norm(normals, axis=1, keepdims=True), 1e-30)
    shading = 0.45 + 0.55 * np.abs(normals @ (np.array([-1.0, -1.0, 1.5]) / np.sqrt(4.25)))
    fig = Figure(figsize=(4.5 * len(panels), 4.5), layout="constrained")
    low, high = vertices.min(0), vertices.max(0)
    for index, (title, labels) in enumerate(panels.items()):
        ax = fig.add_subplot(1, len(panels), index + 1, projection="3d")
        colors = label_colors(face_labels(triangles, labels)) / 255.0
        colors[:, :3] *= shading[:, None]
        ax.add_collection3d(Poly3DCollection(corners, facecolors=colors, edgecolors="none",
                                             linewidths=0))
        ax.set(xlim=(low[0], high[0]), ylim=(low[1], high[1]), zlim=(low[2], high[2]))
        ax.set_title(title)
        ax.set_box_aspect(high - low + 1e-9, zoom=1.3)
        ax.set_axis_off()
    return fig


def figure_png(fig: Figure, dpi: int = 100) -> bytes:
    """The PNG bytes of a figure."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()
