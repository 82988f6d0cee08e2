"""Thin rclpy adapters: message -> numpy -> control law -> safety filter -> message."""
