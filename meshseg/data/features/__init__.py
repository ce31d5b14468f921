"""What the converter derives per vertex from one mesh: the descriptors (`descriptors`:
HKS, normals) and their cache (`descriptor_cache`, read through `cache_entries`), the
hierarchy (`hierarchy`, decimation), the canonical pose (`pose`), all of them for one mesh
(`derived`), and the names and widths of the stored features (`stored`, which loads none
of the descriptor libraries). NumPy only, no TensorFlow."""
