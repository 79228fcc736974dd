// config loader: see config.h
