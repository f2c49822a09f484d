"""Registers `inference` so Django finds its management command; imports nothing heavy (no torch here)."""

from django.apps import AppConfig


class InferenceConfig(AppConfig):
    name = "inference"
    verbose_name = "Inference worker"
