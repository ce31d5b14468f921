"""Small mesh files for the tests."""

# An OBJ whose position 1 is used with two texture coordinates (a seam) and whose
# position 5 no face uses: its vertex list is its five `v` lines, in file order.
SEAM_OBJ = """mtllib skin.mtl
o part
v 0 0 0
v 1 0 0
v 0 1 0
v 0 0 1
v 5 5 5
vt 0 0
vt 1 0
vt 0 1
vt 1 1
vn 0 0 1
usemtl skin
f 1/1/1 2/2/1 3/3/1
f 1/4/1 2/2/1 4/3/1
"""
