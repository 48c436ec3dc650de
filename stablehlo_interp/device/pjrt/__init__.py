"""The PJRT C API in Python: the struct layout, the function table jaxlib calls,
native fast paths and the calls for platform, buffers and executables."""
