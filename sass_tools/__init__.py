from .inspect import nvdisasm_path
